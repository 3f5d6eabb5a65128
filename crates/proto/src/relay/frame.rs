//! Binary frames (feature `frame-bin`, docs/relay-protocol.md §4): `len: u32 BE` (of flags +
//! body), `flags: u8`, body. Flag bit 0: the body is an LZ4 block with the raw size first as u32 LE
//! (lz4_flex's size-prepended block format). Bits 1–7 are reserved: a frame with one set is a
//! protocol error. The body, once decompressed, is one `RelayMessage` as JSON; a
//! `session_transfer` body carries its chunk raw after the JSON (see `encode_body`).
//!
//! Limits are checked before any allocation: `len` against `FRAME_CAP_BYTES` as soon as its 4
//! bytes are there (before the body arrives), reserved bits as soon as the flags byte is there,
//! and the declared raw size against `DECOMPRESSED_CAP_BYTES` before the output buffer exists.
//! "Incomplete" is not an error. Refuses: IO, and deciding what a message means.

use crate::relay::base64;
use crate::relay::message::{MsgType, RelayError, RelayMessage};
use serde_json::Value;

/// The largest `len` (flags + body) accepted or sent: 1 MiB, the line cap's size.
pub const FRAME_CAP_BYTES: usize = 1 << 20;
/// The largest body once decompressed: 4 MiB.
pub const DECOMPRESSED_CAP_BYTES: usize = 4 << 20;
/// Bodies shorter than this are never compressed (docs/performance.md "Relay": small ones grow).
pub const COMPRESS_MIN_BYTES: usize = 1024;
/// Flag bit 0: LZ4 block, raw size prepended (u32 LE).
pub const FLAG_LZ4: u8 = 0x01;
/// Bits that must be zero.
pub const RESERVED_FLAGS: u8 = !FLAG_LZ4;
/// `len` (4) + `flags` (1).
pub const HEADER_BYTES: usize = 5;

/// One decoded frame: its flags as received and its body, decompressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    pub flags: u8,
    pub body: Vec<u8>,
}

impl Frame {
    pub fn compressed(&self) -> bool {
        self.flags & FLAG_LZ4 != 0
    }
}

/// Why bytes are not a frame (every one is a protocol error that closes the link), or why a
/// body cannot be sent as one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrameError {
    /// `len` 0: not even a flags byte.
    ZeroLength,
    /// `len` over `FRAME_CAP_BYTES`.
    TooLong { len_bytes: usize },
    /// A reserved flag bit is set.
    ReservedBits { flags: u8 },
    /// A compressed body shorter than its 4-byte size prefix.
    MissingRawSize,
    /// The declared raw size is over `DECOMPRESSED_CAP_BYTES`: refused before allocating.
    DeclaredTooLarge { declared_bytes: usize },
    /// The declared raw size is under `COMPRESS_MIN_BYTES`: no sender compresses a body that
    /// small, and claudectl (0.90+) ends the link on one, so we refuse it alike.
    DeclaredTooSmall { declared_bytes: usize },
    /// The LZ4 block is corrupt, or decompresses to more than it declared.
    Lz4(String),
    /// The LZ4 block decompresses to fewer bytes than it declared.
    SizeMismatch {
        declared_bytes: usize,
        actual_bytes: usize,
    },
    /// (sending) A body that fits no frame: over the decompressed cap, or over the frame cap
    /// after compression (or without it).
    BodyTooLarge { body_bytes: usize },
    /// (sending) The message cannot be made into a body (a `session_transfer` whose `data`
    /// is not canonical base64, or that has no chunk).
    BadMessage(RelayError),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::ZeroLength => f.write_str("frame length 0 (a frame has at least its flags byte)"),
            FrameError::TooLong { len_bytes } => {
                write!(f, "frame length {len_bytes} exceeds the cap of {FRAME_CAP_BYTES} bytes")
            }
            FrameError::ReservedBits { flags } => {
                write!(f, "frame flags {flags:#04x} set a reserved bit (only bit 0, lz4, is defined)")
            }
            FrameError::MissingRawSize => f.write_str("compressed frame shorter than its 4-byte raw size"),
            FrameError::DeclaredTooLarge { declared_bytes } => write!(
                f,
                "compressed frame declares {declared_bytes} raw bytes, over the cap of {DECOMPRESSED_CAP_BYTES}"
            ),
            FrameError::DeclaredTooSmall { declared_bytes } => write!(
                f,
                "compressed frame declares {declared_bytes} raw bytes, under the {COMPRESS_MIN_BYTES} below which no frame is compressed"
            ),
            FrameError::Lz4(d) => write!(f, "compressed frame is not a valid LZ4 block of its declared size: {d}"),
            FrameError::SizeMismatch { declared_bytes, actual_bytes } => write!(
                f,
                "compressed frame declares {declared_bytes} raw bytes but holds {actual_bytes}"
            ),
            FrameError::BodyTooLarge { body_bytes } => write!(
                f,
                "a body of {body_bytes} bytes fits no frame (caps: {FRAME_CAP_BYTES} on the wire, {DECOMPRESSED_CAP_BYTES} raw)"
            ),
            FrameError::BadMessage(e) => write!(f, "message cannot be framed: {e}"),
        }
    }
}

impl std::error::Error for FrameError {}

/// Decodes the frame at the start of `buf`: `Ok(Some((frame, bytes consumed)))`, `Ok(None)`
/// when more bytes are needed, or the error as soon as the bytes so far prove one.
pub fn decode_frame(buf: &[u8]) -> Result<Option<(Frame, usize)>, FrameError> {
    if buf.len() < 4 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]) as usize;
    if len == 0 {
        return Err(FrameError::ZeroLength);
    }
    if len > FRAME_CAP_BYTES {
        return Err(FrameError::TooLong { len_bytes: len });
    }
    let Some(&flags) = buf.get(4) else {
        return Ok(None);
    };
    if flags & RESERVED_FLAGS != 0 {
        return Err(FrameError::ReservedBits { flags });
    }
    let total = 4 + len;
    if buf.len() < total {
        return Ok(None);
    }
    Ok(Some((
        open_payload(flags, &buf[HEADER_BYTES..total])?,
        total,
    )))
}

/// A frame from its flags and the bytes after them (decompressed if flagged). `framemac`
/// calls this once a frame's tag has checked, so only authenticated bytes reach LZ4.
pub fn open_payload(flags: u8, payload: &[u8]) -> Result<Frame, FrameError> {
    let body = if flags & FLAG_LZ4 != 0 {
        decompress(payload)?
    } else {
        payload.to_vec()
    };
    Ok(Frame { flags, body })
}

fn decompress(block: &[u8]) -> Result<Vec<u8>, FrameError> {
    if block.len() < 4 {
        return Err(FrameError::MissingRawSize);
    }
    let declared = u32::from_le_bytes([block[0], block[1], block[2], block[3]]) as usize;
    // The bomb check: before the output buffer exists.
    if declared > DECOMPRESSED_CAP_BYTES {
        return Err(FrameError::DeclaredTooLarge {
            declared_bytes: declared,
        });
    }
    if declared < COMPRESS_MIN_BYTES {
        return Err(FrameError::DeclaredTooSmall {
            declared_bytes: declared,
        });
    }
    let mut out = vec![0u8; declared];
    let n = lz4_flex::block::decompress_into(&block[4..], &mut out)
        .map_err(|e| FrameError::Lz4(e.to_string()))?;
    if n != declared {
        return Err(FrameError::SizeMismatch {
            declared_bytes: declared,
            actual_bytes: n,
        });
    }
    Ok(out)
}

/// Accumulates socket bytes and yields frames. Holds what it was given until a frame is
/// complete; since `len` is checked against the cap as soon as it arrives, a peer can make it
/// wait for at most one frame of `FRAME_CAP_BYTES` beyond what was already pushed.
#[derive(Debug, Default)]
pub struct FrameDecoder {
    buf: Vec<u8>,
    /// Bytes of `buf` already consumed as frames.
    pos: usize,
    /// An error, once seen, is sticky: the stream has lost its framing.
    failed: Option<FrameError>,
}

impl FrameDecoder {
    pub fn new() -> FrameDecoder {
        FrameDecoder::default()
    }

    pub fn push(&mut self, bytes: &[u8]) {
        if self.pos > 0 {
            self.buf.drain(..self.pos);
            self.pos = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// The next frame, `Ok(None)` for "need more bytes", or the error (again on every call).
    pub fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        match decode_frame(&self.buf[self.pos..]) {
            Ok(Some((frame, n))) => {
                self.pos += n;
                if self.pos == self.buf.len() {
                    self.buf = Vec::new();
                    self.pos = 0;
                }
                Ok(Some(frame))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                self.failed = Some(e.clone());
                Err(e)
            }
        }
    }

    /// Bytes pushed and not yet returned as frames.
    pub fn pending_len(&self) -> usize {
        self.buf.len() - self.pos
    }
}

/// Frames a body: compressed when `lz4` is on, the body is at least `COMPRESS_MIN_BYTES`, and
/// compression makes it smaller (otherwise it goes raw: allowed, and cheaper to read).
pub fn encode_frame(body: &[u8], lz4: bool) -> Result<Vec<u8>, FrameError> {
    let too_large = FrameError::BodyTooLarge {
        body_bytes: body.len(),
    };
    let compressed =
        if lz4 && body.len() >= COMPRESS_MIN_BYTES && body.len() <= DECOMPRESSED_CAP_BYTES {
            let c = lz4_flex::block::compress_prepend_size(body);
            (c.len() < body.len()).then_some(c)
        } else {
            None
        };
    let (flags, payload) = match &compressed {
        Some(c) => (FLAG_LZ4, c.as_slice()),
        None => (0, body),
    };
    let len = 1 + payload.len();
    if len > FRAME_CAP_BYTES {
        return Err(too_large);
    }
    let mut out = Vec::with_capacity(4 + len);
    out.extend_from_slice(&(len as u32).to_be_bytes());
    out.push(flags);
    out.extend_from_slice(payload);
    Ok(out)
}

/// The payload key that replaces `data` in a framed `session_transfer`: the count of raw
/// bytes that follow the JSON in the body.
pub const RAW_LEN_KEY: &str = "data_len";

/// A message as a frame body. For `session_transfer` the JSON's payload has `data_len: N`
/// instead of `data`, and the N raw chunk bytes follow the JSON's closing brace directly (no
/// base64 in frames). Every other type is its JSON alone.
///
/// A message holding its chunk raw (read from a frame, made with `with_chunk`, or made raw by
/// `Session::send`) is framed without any base64; one holding it as base64 text is decoded
/// here, once.
pub fn encode_body(msg: &RelayMessage) -> Result<Vec<u8>, RelayError> {
    if msg.msg_type != MsgType::SessionTransfer {
        return Ok(msg.encode_json());
    }
    let bad = |detail: &str| RelayError::BadPayload {
        msg_type: "session_transfer".into(),
        detail: detail.into(),
    };
    let Value::Object(map) = &msg.payload else {
        return Err(bad("payload must be an object"));
    };
    let decoded: Vec<u8>;
    let raw: &[u8] = match msg.chunk() {
        Some(chunk) => chunk,
        None => {
            let Some(Value::String(data)) = map.get("data") else {
                return Err(bad("data must be a base64 string"));
            };
            decoded = base64::decode(data)
                .map_err(|e| bad(&format!("data is not canonical padded base64: {e}")))?;
            &decoded
        }
    };
    // The head: every payload key but `data` (absent anyway when the chunk is raw), so the
    // chunk's text, if any, is never copied.
    let mut framed = serde_json::Map::new();
    for (k, v) in map {
        if k != "data" {
            framed.insert(k.clone(), v.clone());
        }
    }
    framed.insert(RAW_LEN_KEY.into(), Value::from(raw.len()));
    let head = RelayMessage::new(
        msg.id.clone(),
        msg.msg_type.clone(),
        msg.from_peer.clone(),
        msg.timestamp,
        Value::Object(framed),
    );
    let mut body = head.encode_json();
    body.reserve_exact(raw.len());
    body.extend_from_slice(raw);
    Ok(body)
}

/// Reads a frame body back into the message `encode_body` was given. A `session_transfer`
/// comes back holding its chunk raw (`RelayMessage::chunk`): no base64.
pub fn decode_body(body: &[u8]) -> Result<RelayMessage, RelayError> {
    crate::relay::json_budget::check(body).map_err(|_| RelayError::TooManyValues {
        cap: crate::relay::json_budget::MAX_JSON_VALUES,
    })?;
    let mut stream = serde_json::Deserializer::from_slice(body).into_iter::<Value>();
    let value = match stream.next() {
        None => return Err(RelayError::BadBody("empty body".into())),
        Some(Err(e)) => return Err(RelayError::NotJson(e.to_string())),
        Some(Ok(v)) => v,
    };
    let end = stream.byte_offset();
    let tail = &body[end..];
    let mut msg = RelayMessage::from_value(value)?;
    if msg.msg_type != MsgType::SessionTransfer {
        if !tail.is_empty() {
            return Err(RelayError::BadBody(format!(
                "{} raw bytes after a {} message (only session_transfer carries raw data)",
                tail.len(),
                msg.msg_type
            )));
        }
        return Ok(msg);
    }
    let Value::Object(map) = &mut msg.payload else {
        return Err(RelayError::BadBody("payload is not an object".into()));
    };
    if map.contains_key("data") {
        return Err(RelayError::BadBody(
            "a framed session_transfer carries data_len and raw bytes, not base64 data".into(),
        ));
    }
    let declared = map.remove(RAW_LEN_KEY).and_then(|v| v.as_u64());
    match declared {
        Some(n) if n == tail.len() as u64 => {}
        Some(n) => {
            return Err(RelayError::BadBody(format!(
                "session_transfer declares data_len {n} but {} raw bytes follow",
                tail.len()
            )))
        }
        None => {
            return Err(RelayError::BadBody(
                "a framed session_transfer needs an integer data_len".into(),
            ))
        }
    }
    Ok(msg.with_chunk(tail))
}

/// A message as a whole frame, ready to write.
pub fn encode_message(msg: &RelayMessage, lz4: bool) -> Result<Vec<u8>, FrameError> {
    let body = encode_body(msg).map_err(FrameError::BadMessage)?;
    encode_frame(&body, lz4)
}

/// How a link's frame bodies hold a message (docs/relay-protocol.md §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyForm {
    /// This project's hubs: JSON, and a `session_transfer` chunk raw after it (`data_len`).
    RawChunks,
    /// claudectl's: the message's JSON alone, exactly its line without the `\n`; a chunk
    /// stays base64 `data` (claudectl 0.92's `transfer.rs` frames it so).
    Json,
}

/// A message as the frame `form` makes it.
pub fn encode_message_as(
    msg: &RelayMessage,
    lz4: bool,
    form: BodyForm,
) -> Result<Vec<u8>, FrameError> {
    match form {
        BodyForm::RawChunks => encode_message(msg, lz4),
        BodyForm::Json => encode_frame(&msg.encode_json(), lz4),
    }
}

/// Reads a frame body written in `form`. A `Json` body is decoded as a line's content is
/// (nothing may follow the JSON); its chunk, if any, stays base64 until the session's check.
pub fn decode_body_as(body: &[u8], form: BodyForm) -> Result<RelayMessage, RelayError> {
    match form {
        BodyForm::RawChunks => decode_body(body),
        BodyForm::Json => RelayMessage::decode_json(body),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::message::Payload;
    use serde_json::json;
    use std::sync::Arc;

    fn frame(flags: u8, body: &[u8]) -> Vec<u8> {
        let mut v = ((body.len() + 1) as u32).to_be_bytes().to_vec();
        v.push(flags);
        v.extend_from_slice(body);
        v
    }

    fn msg(t: MsgType, payload: Value) -> RelayMessage {
        RelayMessage::new("msg_1_1_00", t, "a", 1_700_000_000_000, payload)
    }

    #[test]
    fn truncated_frames_need_more_at_every_prefix() {
        let f = frame(0, br#"{"x":1}"#);
        for cut in 0..f.len() {
            assert_eq!(decode_frame(&f[..cut]), Ok(None), "prefix of {cut} bytes");
        }
        let (got, n) = decode_frame(&f).unwrap().unwrap();
        assert_eq!(n, f.len());
        assert_eq!(got.body, br#"{"x":1}"#);
        // Byte by byte through the decoder, with a second frame behind it.
        let mut d = FrameDecoder::new();
        let mut two = f.clone();
        two.extend_from_slice(&frame(0, b"{}"));
        let mut out = Vec::new();
        for b in &two {
            d.push(std::slice::from_ref(b));
            while let Some(fr) = d.next_frame().unwrap() {
                out.push(fr.body);
            }
        }
        assert_eq!(out, vec![br#"{"x":1}"#.to_vec(), b"{}".to_vec()]);
        assert_eq!(d.pending_len(), 0);
    }

    #[test]
    fn oversized_length_is_refused_from_the_header_alone() {
        let len = (FRAME_CAP_BYTES + 1) as u32;
        assert_eq!(
            decode_frame(&len.to_be_bytes()),
            Err(FrameError::TooLong {
                len_bytes: FRAME_CAP_BYTES + 1
            })
        );
        assert_eq!(
            decode_frame(&u32::MAX.to_be_bytes()),
            Err(FrameError::TooLong {
                len_bytes: u32::MAX as usize
            })
        );
        assert_eq!(decode_frame(&[0, 0, 0, 0, 0]), Err(FrameError::ZeroLength));
        // Exactly the cap is allowed (and waits for its body).
        let mut at_cap = (FRAME_CAP_BYTES as u32).to_be_bytes().to_vec();
        at_cap.push(0);
        assert_eq!(decode_frame(&at_cap), Ok(None));
        // A sticky error in the decoder.
        let mut d = FrameDecoder::new();
        d.push(&u32::MAX.to_be_bytes());
        assert!(d.next_frame().is_err());
        d.push(&frame(0, b"{}"));
        assert!(d.next_frame().is_err(), "framing is lost for good");
    }

    #[test]
    fn every_reserved_bit_is_a_protocol_error_before_the_body_arrives() {
        for bit in 1..8 {
            let flags = 1u8 << bit;
            let header = [0, 0, 0, 10, flags];
            assert_eq!(
                decode_frame(&header),
                Err(FrameError::ReservedBits { flags })
            );
            assert_eq!(
                decode_frame(&frame(flags | FLAG_LZ4, b"")),
                Err(FrameError::ReservedBits {
                    flags: flags | FLAG_LZ4
                })
            );
        }
    }

    #[test]
    fn lz4_bomb_is_refused_by_its_declared_size() {
        // Declares 4 GiB - 1, carries 3 bytes: refused before any buffer of that size exists.
        let mut body = u32::MAX.to_le_bytes().to_vec();
        body.extend_from_slice(&[0x1f, 0, 0]);
        assert_eq!(
            decode_frame(&frame(FLAG_LZ4, &body)),
            Err(FrameError::DeclaredTooLarge {
                declared_bytes: u32::MAX as usize
            })
        );
        // One byte over the cap: refused; exactly the cap: allowed when real.
        let mut over = ((DECOMPRESSED_CAP_BYTES + 1) as u32).to_le_bytes().to_vec();
        over.extend_from_slice(&[0]);
        assert_eq!(
            decode_frame(&frame(FLAG_LZ4, &over)),
            Err(FrameError::DeclaredTooLarge {
                declared_bytes: DECOMPRESSED_CAP_BYTES + 1
            })
        );
        let zeros = vec![b'0'; DECOMPRESSED_CAP_BYTES];
        let real = lz4_flex::block::compress_prepend_size(&zeros);
        assert!(real.len() < FRAME_CAP_BYTES);
        let (f, _) = decode_frame(&frame(FLAG_LZ4, &real)).unwrap().unwrap();
        assert_eq!(f.body.len(), DECOMPRESSED_CAP_BYTES);
        // 4 MiB + 1 of real data compresses below the frame cap yet is still refused.
        let zeros = vec![b'0'; DECOMPRESSED_CAP_BYTES + 1];
        let real = lz4_flex::block::compress_prepend_size(&zeros);
        assert!(matches!(
            decode_frame(&frame(FLAG_LZ4, &real)),
            Err(FrameError::DeclaredTooLarge { .. })
        ));
        assert_eq!(
            encode_frame(&zeros, true),
            Err(FrameError::BodyTooLarge {
                body_bytes: zeros.len()
            })
        );
    }

    #[test]
    fn declared_size_that_lies_is_refused() {
        let raw = vec![b'a'; 5000];
        let block = lz4_flex::block::compress(&raw);
        let with = |declared: u32| {
            let mut b = declared.to_le_bytes().to_vec();
            b.extend_from_slice(&block);
            decode_frame(&frame(FLAG_LZ4, &b))
        };
        assert_eq!(with(5000).unwrap().unwrap().0.body, raw);
        assert!(
            matches!(with(4999), Err(FrameError::Lz4(_))),
            "claims smaller than it is"
        );
        assert_eq!(
            with(5001),
            Err(FrameError::SizeMismatch {
                declared_bytes: 5001,
                actual_bytes: 5000
            }),
            "claims larger than it is"
        );
        // Under 1024 is refused before LZ4 runs: no sender compresses so little, and
        // claudectl ends a link on it (relay-compat-0.92.md §2).
        assert_eq!(
            with(0),
            Err(FrameError::DeclaredTooSmall { declared_bytes: 0 })
        );
        assert_eq!(
            with(1023),
            Err(FrameError::DeclaredTooSmall {
                declared_bytes: 1023
            })
        );
        assert_eq!(
            decode_frame(&frame(FLAG_LZ4, &[1, 0])),
            Err(FrameError::MissingRawSize)
        );
        // Garbage after a valid size.
        let mut junk = 2000u32.to_le_bytes().to_vec();
        junk.extend_from_slice(&[0xff; 20]);
        assert!(matches!(
            decode_frame(&frame(FLAG_LZ4, &junk)),
            Err(FrameError::Lz4(_))
        ));
    }

    #[test]
    fn compression_threshold_and_only_when_agreed() {
        let small = vec![b'a'; COMPRESS_MIN_BYTES - 1];
        let at = vec![b'a'; COMPRESS_MIN_BYTES];
        assert_eq!(
            encode_frame(&small, true).unwrap()[4],
            0,
            "under 1 KiB stays raw"
        );
        assert_eq!(
            encode_frame(&at, true).unwrap()[4],
            FLAG_LZ4,
            "1 KiB compresses"
        );
        assert_eq!(encode_frame(&at, false).unwrap()[4], 0, "not without lz4");
        // Incompressible bytes go raw even over the threshold.
        let mut x = 0x1234_5678u32;
        let noise: Vec<u8> = (0..4096)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 17;
                x ^= x << 5;
                x as u8
            })
            .collect();
        assert_eq!(encode_frame(&noise, true).unwrap()[4], 0);
        for body in [small, at, noise] {
            let f = encode_frame(&body, true).unwrap();
            let (got, n) = decode_frame(&f).unwrap().unwrap();
            assert_eq!((got.body, n), (body, f.len()));
        }
        // Uncompressed bodies up to the cap minus the flags byte.
        let max = vec![b'{'; FRAME_CAP_BYTES - 1];
        assert_eq!(
            encode_frame(&max, false).unwrap().len(),
            FRAME_CAP_BYTES + 4
        );
        assert!(encode_frame(&vec![b'{'; FRAME_CAP_BYTES], false).is_err());
    }

    #[test]
    fn session_transfer_travels_raw_and_comes_back_identical() {
        let raw: Vec<u8> = (0..3000u32).map(|i| (i * 7 % 251) as u8).collect();
        let m = msg(
            MsgType::SessionTransfer,
            json!({"session_id":"s1","cwd":"/w","seq":0,"total":1,"digest":"ab","data":base64::encode(&raw)}),
        );
        let body = encode_body(&m).unwrap();
        assert!(body.ends_with(&raw), "the chunk follows the JSON raw");
        let json_len = body.len() - raw.len();
        assert!(std::str::from_utf8(&body[..json_len])
            .unwrap()
            .contains("\"data_len\":3000"));
        assert!(!std::str::from_utf8(&body[..json_len])
            .unwrap()
            .contains("\"data\""));
        assert_eq!(decode_body(&body).unwrap(), m);
        let f = encode_message(&m, true).unwrap();
        let (fr, _) = decode_frame(&f).unwrap().unwrap();
        assert_eq!(decode_body(&fr.body).unwrap(), m);

        // Lies about the raw length, base64 inside a frame, raw bytes after other types.
        let mut short = body.clone();
        short.pop();
        assert!(matches!(decode_body(&short), Err(RelayError::BadBody(_))));
        let with_b64 = m.encode_json();
        assert!(matches!(
            decode_body(&with_b64),
            Err(RelayError::BadBody(_))
        ));
        let mut hb = msg(MsgType::Heartbeat, json!({})).encode_json();
        assert!(decode_body(&hb).is_ok());
        hb.push(0);
        assert!(matches!(decode_body(&hb), Err(RelayError::BadBody(_))));
        assert!(matches!(decode_body(b""), Err(RelayError::BadBody(_))));
        assert!(decode_body(b"\xff\xfe").is_err());

        // Framed from the decoded (raw) message: the same body, without any base64.
        let back = decode_body(&body).unwrap();
        assert_eq!(back.chunk().map(|c| &c[..]), Some(&raw[..]));
        assert!(back.payload.get("data").is_none());
        assert_eq!(encode_body(&back).unwrap(), body);
    }

    fn transfer_line(raw: &[u8]) -> String {
        format!(
            r#"{{"id":"msg_1_1_00","msg_type":"session_transfer","from_peer":"a","timestamp":1700000000000,"payload":{{"cwd":"/w","data":"{}","digest":"ab","seq":2,"session_id":"s1","total":3}}}}"#,
            base64::encode(raw)
        )
    }

    fn calls_since(before: (usize, usize)) -> (usize, usize) {
        let now = base64::calls::get();
        (now.0 - before.0, now.1 - before.1)
    }

    #[test]
    fn line_to_typed_to_frame_to_typed_round_trips() {
        for len in [0usize, 1, 2, 3, 1000, 70_000] {
            let raw: Vec<u8> = (0..len).map(|i| (i * 31 % 256) as u8).collect();
            let line = transfer_line(&raw);
            let from_line = RelayMessage::decode_line(line.as_bytes()).unwrap();
            let typed = match from_line.payload_typed().unwrap() {
                Payload::SessionTransfer(st) => st,
                other => panic!("{other:?}"),
            };
            assert_eq!(&typed.data[..], &raw[..]);
            // The typed payload as a message holding the chunk raw, framed and read back.
            let m = RelayMessage::new(
                from_line.id.clone(),
                MsgType::SessionTransfer,
                "a",
                from_line.timestamp,
                typed.head(),
            )
            .with_chunk(Arc::clone(&typed.data));
            let before = base64::calls::get();
            let f = encode_message(&m, true).unwrap();
            let (fr, _) = decode_frame(&f).unwrap().unwrap();
            let from_frame = decode_body(&fr.body).unwrap();
            let again = from_frame.payload_typed().unwrap();
            assert_eq!(calls_since(before), (0, 0), "no base64 on the frame path");
            assert_eq!(again, Payload::SessionTransfer(typed));
            assert_eq!(from_frame, from_line, "the same message in either form");
            // The frame from the line's message (text form: one decode) is the same frame.
            assert_eq!(encode_message(&from_line, true).unwrap(), f);
        }
    }

    #[test]
    fn frame_to_typed_to_line_gives_back_the_original_line() {
        let raw: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 253) as u8).collect();
        let line = transfer_line(&raw);
        let f = encode_message(&RelayMessage::decode_line(line.as_bytes()).unwrap(), true).unwrap();
        let (fr, _) = decode_frame(&f).unwrap().unwrap();
        assert!(fr.compressed());
        let m = decode_body(&fr.body).unwrap();
        // The message itself as a line: one encode, byte-identical to the original.
        let before = base64::calls::get();
        assert_eq!(m.encode_json(), line.as_bytes());
        assert_eq!(calls_since(before), (1, 0));
        // Through the typed payload.
        let Payload::SessionTransfer(st) = m.payload_typed().unwrap() else {
            panic!("not a transfer")
        };
        let rebuilt = RelayMessage::new(
            m.id.clone(),
            MsgType::SessionTransfer,
            m.from_peer.clone(),
            m.timestamp,
            st.to_value(),
        );
        assert_eq!(rebuilt.encode_line(), format!("{line}\n").into_bytes());
    }

    #[test]
    fn a_raw_chunk_is_refused_where_it_does_not_belong() {
        // On another type: framed as that type's JSON, and refused by the typed check.
        let hb = msg(MsgType::Heartbeat, json!({})).with_chunk(&b"xyz"[..]);
        assert!(matches!(
            hb.payload_typed(),
            Err(RelayError::BadPayload { .. })
        ));
        // A text chunk that is not canonical base64 cannot be framed.
        let bad = msg(
            MsgType::SessionTransfer,
            json!({"session_id":"s","cwd":"/","seq":0,"total":1,"digest":"d","data":"Zm9=x"}),
        );
        assert!(matches!(
            encode_body(&bad),
            Err(RelayError::BadPayload { .. })
        ));
        let none = msg(
            MsgType::SessionTransfer,
            json!({"session_id":"s","cwd":"/","seq":0,"total":1,"digest":"d"}),
        );
        assert!(matches!(
            encode_message(&none, false),
            Err(FrameError::BadMessage(RelayError::BadPayload { .. }))
        ));
    }
}
