//! Checks the v1 authentication test vectors in `protocol/relay/auth/v1_vectors.json`
//! (docs/relay-protocol.md §2.2 and §4.1; format in `protocol/relay/README.md`): one complete
//! v1 exchange (challenge, handshake, ack) with its exact transcript bytes, both proofs, both
//! frame keys and the first frame-mac frames each way, so another implementation can check
//! itself byte for byte. The exchange's lines are also the v1 cases of the `challenge`,
//! `handshake` and `handshake_ack` fixtures, which this test checks too.
//!
//! `cargo test --test integration -- --ignored relay_auth_vectors::bless` rewrites the vectors from their
//! inputs (after a deliberate change to the transcript; never to make a failing test pass).

use agent_hub_proto::relay::auth::{parse_key, to_hex};
use agent_hub_proto::relay::frame::encode_message;
use agent_hub_proto::relay::framemac::FrameMac;
use agent_hub_proto::relay::message::{Handshake, HandshakeAck};
use agent_hub_proto::relay::transcript::{
    AckFields, Transcript, LABEL_ACCEPTOR_PROOF, LABEL_DIALER_PROOF,
};
use agent_hub_proto::relay::{Payload, RelayMessage};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

#[derive(Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
struct Vectors {
    note: String,
    key_hex: String,
    challenge: String,
    handshake: String,
    handshake_ack: String,
    dialer_proof_input_hex: String,
    acceptor_proof_input_hex: String,
    dialer_proof: String,
    acceptor_proof: String,
    key_dialer_to_acceptor: String,
    key_acceptor_to_dialer: String,
    frames: Vec<VFrame>,
}

#[derive(Debug, Serialize, Deserialize, PartialEq, Clone)]
#[serde(deny_unknown_fields)]
struct VFrame {
    /// `dialer_to_acceptor` or `acceptor_to_dialer`.
    direction: String,
    seq: u64,
    line: String,
    frame_hex: String,
}

fn path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("protocol/relay/auth/v1_vectors.json")
}

fn load() -> Vectors {
    serde_json::from_str(&std::fs::read_to_string(path()).unwrap()).unwrap()
}

fn msg(line: &str) -> RelayMessage {
    RelayMessage::decode_line(line.as_bytes()).unwrap()
}

/// Everything derived from the vectors' inputs (key, the three lines without proofs, the
/// frames' lines) by this implementation.
fn derive(v: &Vectors) -> Vectors {
    let key = parse_key(&v.key_hex).unwrap();
    let ch = msg(&v.challenge);
    let acceptor = ch.payload["peer"].as_str().unwrap();
    let nonce = ch.payload["nonce"].as_str().unwrap();
    let hs_msg = msg(&v.handshake);
    let Ok(Payload::Handshake(mut hs)) = hs_msg.payload_typed() else {
        panic!("not a handshake")
    };
    let t = Transcript::new(&hs_msg.from_peer, acceptor, nonce, &hs);
    let ack_msg = msg(&v.handshake_ack);
    let Ok(Payload::HandshakeAck(mut ack)) = ack_msg.payload_typed() else {
        panic!("not an ack")
    };
    let fields = AckFields::of(&ack);
    hs.proof = t.dialer_proof(&key);
    ack.proof = Some(t.acceptor_proof(&fields, &key));
    let relined = |m: &RelayMessage, p: Payload| {
        let mut m = m.clone();
        m.payload = p.to_value();
        String::from_utf8(m.encode_line())
            .unwrap()
            .trim_end()
            .to_owned()
    };
    let keys = t.frame_keys(&fields, &key);
    let mut d = FrameMac::for_dialer(&keys);
    let mut a = FrameMac::for_acceptor(&keys);
    let frames = v
        .frames
        .iter()
        .map(|f| {
            let plain = encode_message(&msg(&f.line), true).unwrap();
            let (mac, seq) = match f.direction.as_str() {
                "dialer_to_acceptor" => (&mut d, f.seq),
                "acceptor_to_dialer" => (&mut a, f.seq),
                other => panic!("direction {other:?}"),
            };
            assert_eq!(mac.counts().0, seq, "frames are listed in sequence order");
            VFrame {
                frame_hex: to_hex(&mac.seal(plain).unwrap()),
                ..f.clone()
            }
        })
        .collect();
    Vectors {
        note: v.note.clone(),
        key_hex: v.key_hex.clone(),
        challenge: v.challenge.clone(),
        handshake: relined(&hs_msg, Payload::Handshake(hs)),
        handshake_ack: relined(&ack_msg, Payload::HandshakeAck(ack)),
        dialer_proof_input_hex: to_hex(&t.encode(LABEL_DIALER_PROOF, None)),
        acceptor_proof_input_hex: to_hex(&t.encode(LABEL_ACCEPTOR_PROOF, Some(&fields))),
        dialer_proof: t.dialer_proof(&key),
        acceptor_proof: t.acceptor_proof(&fields, &key),
        key_dialer_to_acceptor: to_hex(&keys.dialer_to_acceptor),
        key_acceptor_to_dialer: to_hex(&keys.acceptor_to_dialer),
        frames,
    }
}

#[test]
fn the_v1_vectors_hold() {
    let v = load();
    assert_eq!(
        derive(&v),
        v,
        "the vectors changed (bless only after a deliberate change)"
    );
    // The proofs in the lines are the ones listed.
    let hs: Handshake = serde_json::from_value(msg(&v.handshake).payload).unwrap();
    assert_eq!(hs.proof, v.dialer_proof);
    let ack: HandshakeAck = serde_json::from_value(msg(&v.handshake_ack).payload).unwrap();
    assert_eq!(ack.proof.as_deref(), Some(v.acceptor_proof.as_str()));
    // Each frame opens under the other side's state, in order.
    let key = parse_key(&v.key_hex).unwrap();
    let t = Transcript::new(
        &msg(&v.handshake).from_peer,
        msg(&v.challenge).payload["peer"].as_str().unwrap(),
        msg(&v.challenge).payload["nonce"].as_str().unwrap(),
        &hs,
    );
    let keys = t.frame_keys(&AckFields::of(&ack), &key);
    let mut at_acceptor = FrameMac::for_acceptor(&keys);
    let mut at_dialer = FrameMac::for_dialer(&keys);
    for f in &v.frames {
        let bytes: Vec<u8> = (0..f.frame_hex.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&f.frame_hex[i..i + 2], 16).unwrap())
            .collect();
        let rx = if f.direction == "dialer_to_acceptor" {
            &mut at_acceptor
        } else {
            &mut at_dialer
        };
        let (frame, n) = rx.open(&bytes).unwrap().unwrap();
        assert_eq!(n, bytes.len());
        let got = agent_hub_proto::relay::frame::decode_body(&frame.body).unwrap();
        assert_eq!(got, msg(&f.line));
    }
}

/// The exchange's lines are the fixtures' v1 cases, so the fixtures show real proofs.
#[test]
fn the_fixtures_v1_cases_are_this_exchange() {
    let v = load();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("protocol/relay");
    for (file, case, line) in [
        ("challenge.json", "v1", &v.challenge),
        ("handshake.json", "v1_all_keys", &v.handshake),
        ("handshake_ack.json", "v1_ok", &v.handshake_ack),
    ] {
        let f: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join(file)).unwrap()).unwrap();
        let c = f["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == case)
            .unwrap_or_else(|| panic!("{file}: no case {case}"));
        assert_eq!(
            c["line"].as_str(),
            Some(line.as_str()),
            "{file} case {case}"
        );
    }
}

#[test]
#[ignore = "rewrites protocol/relay/auth/v1_vectors.json"]
fn bless() {
    let v = derive(&load());
    std::fs::write(path(), serde_json::to_string_pretty(&v).unwrap() + "\n").unwrap();
}
