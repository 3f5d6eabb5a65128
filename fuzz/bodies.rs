//! The fuzz targets' bodies. `fuzz_targets/*.rs` wrap them for cargo-fuzz; the main crate's
//! `tests/integration/relay_fixtures.rs` includes this file too and runs them over every fixture and its
//! mutations, so they compile and hold on stable without cargo-fuzz.
//!
//! Each body must never panic on any input, and checks what must hold for every input that
//! decodes: caps respected, and what was decoded encodes and decodes again.

// Each fuzz binary uses one of the two bodies.
#![allow(dead_code)]

use agent_hub_proto::relay::frame::{
    decode_body, encode_body, encode_frame, FrameDecoder, DECOMPRESSED_CAP_BYTES, FRAME_CAP_BYTES,
};
use agent_hub_proto::relay::RelayMessage;

/// Feeds `data` to a `FrameDecoder` in two pushes (split where the first byte says), and
/// round-trips every frame that decodes.
pub fn frame_decoder(data: &[u8]) {
    let split = data
        .first()
        .map_or(0, |&b| usize::from(b) % (data.len() + 1));
    let mut dec = FrameDecoder::new();
    let mut frames = Vec::new();
    for part in [&data[..split], &data[split..]] {
        dec.push(part);
        // Stops at "need more" and at an error (which is sticky).
        while let Ok(Some(f)) = dec.next_frame() {
            frames.push(f);
        }
    }
    for f in frames {
        assert!(
            f.body.len() <= DECOMPRESSED_CAP_BYTES,
            "a body over the decompressed cap"
        );
        if !f.compressed() {
            assert!(
                f.body.len() < FRAME_CAP_BYTES,
                "an uncompressed body over the frame cap"
            );
        }
        if let Ok(msg) = decode_body(&f.body) {
            let body = encode_body(&msg).expect("a decoded message encodes");
            let again = decode_body(&body).expect("an encoded body decodes");
            assert_eq!(again.msg_type, msg.msg_type);
            assert_eq!(again.id, msg.id);
            if body.len() <= DECOMPRESSED_CAP_BYTES {
                // Framing may still refuse a body that does not compress under the cap.
                let _ = encode_frame(&body, true);
            }
        }
    }
}

/// Decodes `data` as one relay line; a message that decodes must encode, decode again to the
/// same envelope, and have its payload parsed or refused without a panic.
pub fn relay_line(data: &[u8]) {
    let Ok(msg) = RelayMessage::decode_line(data) else {
        return;
    };
    let _ = msg.payload_typed();
    let json = msg.encode_json();
    // decode_json, not decode_line: re-encoding may lengthen a line (`1e2` becomes `100.0`).
    let again = RelayMessage::decode_json(&json).expect("an encoded message decodes");
    assert_eq!(again.id, msg.id);
    assert_eq!(again.msg_type, msg.msg_type);
    assert_eq!(again.from_peer, msg.from_peer);
    assert_eq!(again.timestamp, msg.timestamp);
}
