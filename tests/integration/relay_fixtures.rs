//! Checks the relay catalogue fixtures in `protocol/relay/` (format: its README.md) against
//! this implementation: one fixture file per msg_type (v0 and v1), each case's exact NDJSON line
//! through `RelayMessage::decode_line` and back through `encode_line`, its typed payload
//! (required keys required, optional ones optional, exact round trip), and its frame-bin
//! frame (hex, compressed where the body is 1 KiB or more) through the frame codec.
//!
//! `catalogue` matches `MsgType` with no wildcard, so a new type fails to compile here until
//! it is listed, and then fails this test until it has a fixture and a row in
//! `docs/relay-protocol.md`. Also runs the fuzz targets' bodies (`fuzz/bodies.rs`) over every
//! fixture and mutations of it, so they keep compiling and passing on stable, and checks with
//! a counting allocator that an LZ4 bomb is refused without allocating.
//!
//! `cargo test --test integration -- --ignored relay_fixtures::bless` rewrites the frame hex of every case
//! from the lines (after a deliberate change to the frame encoder).

use agent_hub_proto::relay::frame::{
    decode_body, decode_frame, encode_message, COMPRESS_MIN_BYTES, FLAG_LZ4,
};
use agent_hub_proto::relay::message::{v0_knows, V0_TYPES, V1_TYPES};
use agent_hub_proto::relay::{feature_for, Feature, MsgType, Payload, RelayMessage};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::{Path, PathBuf};

// The fuzz targets' bodies, as the seed corpus test compiles them in.
use crate::fuzz_seeds::bodies as fuzz_bodies;

// ----- a counting allocator: the largest single allocation on this thread -----

struct Counting;

thread_local! {
    static LARGEST_BYTES: Cell<usize> = const { Cell::new(0) };
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = LARGEST_BYTES.try_with(|m| m.set(m.get().max(layout.size())));
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let _ = LARGEST_BYTES.try_with(|m| m.set(m.get().max(layout.size())));
        System.alloc_zeroed(layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = LARGEST_BYTES.try_with(|m| m.set(m.get().max(new_size)));
        System.realloc(ptr, layout, new_size)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

// ----- the catalogue, as this test knows it -----

#[derive(Debug, PartialEq)]
struct Row {
    /// `v0`, or the feature that introduced the type.
    introduced: &'static str,
    feature: Option<Feature>,
    known_by_0_64: bool,
}

const fn v0(known_by_0_64: bool) -> Row {
    Row {
        introduced: "v0",
        feature: None,
        known_by_0_64,
    }
}

/// No wildcard: adding a `MsgType` variant breaks the build here until it is listed.
fn catalogue(t: &MsgType) -> Option<Row> {
    Some(match t {
        MsgType::Challenge => v0(true),
        MsgType::Handshake => v0(true),
        MsgType::HandshakeAck => v0(true),
        MsgType::Heartbeat => v0(true),
        MsgType::Ack => v0(true),
        MsgType::DelegateTask => v0(true),
        MsgType::TaskStatus => v0(true),
        MsgType::TaskHandoff => v0(true),
        MsgType::TaskInterrupt => v0(true),
        MsgType::KnowledgeSync => v0(true),
        MsgType::KnowledgeRequest => v0(true),
        MsgType::KnowledgeSnapshot => v0(true),
        MsgType::HiveJoinRequest => v0(false),
        MsgType::HiveJoinResult => v0(false),
        MsgType::KnowledgeRejected => v0(false),
        MsgType::SessionTransfer => v0(false),
        MsgType::SessionReceived => v0(false),
        MsgType::BusForward => Row {
            introduced: "bus-forward",
            feature: Some(Feature::BusForward),
            known_by_0_64: false,
        },
        MsgType::TaskRequest | MsgType::TaskAnswer | MsgType::TaskRequestClosed => Row {
            introduced: "task-approvals",
            feature: Some(Feature::TaskApprovals),
            known_by_0_64: false,
        },
        // Not a type: whatever arrives under another name is logged once and dropped.
        MsgType::Unknown(_) => return None,
    })
}

// ----- loading -----

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Fixture {
    msg_type: String,
    introduced: String,
    feature: Option<String>,
    known_by_0_64: bool,
    /// Top-level payload keys a decoder must require.
    required: Vec<String>,
    /// Top-level payload keys that may be absent.
    optional: Vec<String>,
    note: String,
    cases: Vec<Case>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
    /// The exact NDJSON line, without its `\n`.
    line: String,
    /// The same message as one frame-bin frame on a link that agreed lz4, lowercase hex.
    #[serde(default)]
    frame_hex: String,
    /// Whether that frame is LZ4-compressed (its body is 1 KiB or more).
    #[serde(default)]
    frame_compressed: bool,
}

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("protocol")
        .join("relay")
}

fn load_all() -> Vec<(PathBuf, Fixture)> {
    let mut out = Vec::new();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir())
        .expect("protocol/relay exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    for p in paths {
        let text = std::fs::read_to_string(&p).unwrap();
        let f: Fixture =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        out.push((p, f));
    }
    out
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    assert!(s.len() % 2 == 0, "odd hex length");
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

// ----- tests -----

#[test]
fn every_type_has_a_fixture_a_catalogue_row_and_a_docs_row() {
    let fixtures = load_all();
    let docs = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/relay-protocol.md"),
    )
    .unwrap();
    let mut problems = Vec::new();
    for t in V0_TYPES.iter().chain(V1_TYPES.iter()) {
        let Some(row) = catalogue(t) else {
            problems.push(format!("{t}: missing from the catalogue"));
            continue;
        };
        assert_eq!(
            row.feature,
            feature_for(t),
            "{t}: feature_for disagrees with the catalogue"
        );
        assert_eq!(
            row.known_by_0_64,
            v0_knows("0.64.0", t),
            "{t}: the 0.64 table disagrees"
        );
        match fixtures.iter().find(|(_, f)| f.msg_type == t.as_str()) {
            None => problems.push(format!("{t}: no protocol/relay/{t}.json")),
            Some((path, f)) => {
                let name = path.file_stem().unwrap().to_str().unwrap();
                if name != t.as_str() {
                    problems.push(format!(
                        "{}: file name must be the msg_type",
                        path.display()
                    ));
                }
                let got = (f.introduced.as_str(), f.feature.as_deref(), f.known_by_0_64);
                let want = (
                    row.introduced,
                    row.feature.map(Feature::as_str),
                    row.known_by_0_64,
                );
                if got != want {
                    problems.push(format!("{t}: fixture says {got:?}, catalogue {want:?}"));
                }
                if f.cases.is_empty() {
                    problems.push(format!("{t}: no cases"));
                }
            }
        }
        if !docs.contains(&format!("| `{t}` |")) {
            problems.push(format!("{t}: no row in docs/relay-protocol.md's catalogue"));
        }
    }
    for (path, f) in &fixtures {
        let t = MsgType::parse(&f.msg_type).unwrap();
        if catalogue(&t).is_none() {
            problems.push(format!(
                "{}: {:?} is not a catalogued type",
                path.display(),
                f.msg_type
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert_eq!(fixtures.len(), V0_TYPES.len() + V1_TYPES.len());
    assert!(catalogue(&MsgType::Unknown("bus_relay".into())).is_none());
}

/// The `task-approvals` cases are messages a receiver acts on, not only parses: each passes
/// the bounds the receiving book checks first (`relay::message::approval`, docs/relay-protocol.md
/// §8), so a fixture written from the docs is one a hub would take.
#[test]
fn task_approvals_cases_pass_the_receivers_checks() {
    let mut seen = 0;
    for (path, f) in load_all() {
        for c in &f.cases {
            let msg = RelayMessage::decode_line(c.line.as_bytes()).unwrap();
            let checked = match msg.payload_typed().unwrap() {
                Payload::TaskRequest(r) => r.check(),
                Payload::TaskAnswer(a) => a.check(),
                Payload::TaskRequestClosed(x) => x.check(),
                _ => continue,
            };
            seen += 1;
            assert!(
                checked.is_ok(),
                "{} {}: {checked:?}",
                path.display(),
                c.name
            );
        }
    }
    assert_eq!(
        seen, 8,
        "three task_request, two task_answer, three task_request_closed"
    );
}

#[test]
fn every_case_round_trips_as_a_line_a_typed_payload_and_a_frame() {
    let mut problems = Vec::new();
    let mut compressed_cases = 0;
    for (path, f) in load_all() {
        let t = MsgType::parse(&f.msg_type).unwrap();
        for c in &f.cases {
            let at = format!("{} case {}", path.display(), c.name);
            let mut check = |ok: bool, what: String| {
                if !ok {
                    problems.push(format!("{at}: {what}"));
                }
            };
            // The line.
            let msg = match RelayMessage::decode_line(c.line.as_bytes()) {
                Ok(m) => m,
                Err(e) => {
                    check(false, format!("line does not decode: {e}"));
                    continue;
                }
            };
            check(
                msg.msg_type == t,
                format!("msg_type {} in the line", msg.msg_type),
            );
            let mut want_line = c.line.clone().into_bytes();
            want_line.push(b'\n');
            check(
                msg.encode_line() == want_line,
                format!(
                    "re-encodes as {}",
                    String::from_utf8_lossy(&msg.encode_line())
                ),
            );
            check(
                c.line.len() <= agent_hub_proto::relay::message::LINE_CAP_BYTES,
                "line over the cap".into(),
            );

            // The typed payload: exact round trip; required keys required; optional optional.
            match msg.payload_typed() {
                Err(e) => check(false, format!("payload does not parse: {e}")),
                Ok(p) => {
                    check(p.msg_type() == t, "typed payload has another type".into());
                    check(
                        p.to_value() == msg.payload,
                        format!("typed payload re-encodes as {}", p.to_value()),
                    );
                }
            }
            let obj = msg.payload.as_object().unwrap();
            for k in obj.keys() {
                check(
                    f.required.contains(k) || f.optional.contains(k),
                    format!("key {k:?} is neither required nor optional"),
                );
            }
            for k in &f.required {
                let mut without = msg.payload.clone();
                let had = without.as_object_mut().unwrap().remove(k).is_some();
                check(had, format!("required key {k:?} missing from the case"));
                check(
                    Payload::parse(&t, &without).is_err(),
                    format!("parses without required key {k:?}"),
                );
            }
            for k in &f.optional {
                let mut without = msg.payload.clone();
                if without.as_object_mut().unwrap().remove(k).is_some() {
                    check(
                        Payload::parse(&t, &without).is_ok(),
                        format!("refused without optional key {k:?}"),
                    );
                }
            }
            let mut extra = msg.payload.clone();
            extra
                .as_object_mut()
                .unwrap()
                .insert("added_by_a_later_version".into(), Value::from(1));
            check(
                Payload::parse(&t, &extra).is_ok(),
                "an unknown extra key is not ignored".into(),
            );

            // The frame.
            let frame = unhex(&c.frame_hex);
            match decode_frame(&frame) {
                Ok(Some((fr, n))) => {
                    check(
                        n == frame.len(),
                        "frame_hex is not exactly one frame".into(),
                    );
                    check(
                        fr.compressed() == c.frame_compressed,
                        "frame_compressed disagrees with the flags".into(),
                    );
                    check(
                        fr.compressed() == (fr.body.len() >= COMPRESS_MIN_BYTES),
                        format!(
                            "a {}-byte body must be compressed exactly when it is 1 KiB or more",
                            fr.body.len()
                        ),
                    );
                    compressed_cases += usize::from(fr.compressed());
                    match decode_body(&fr.body) {
                        Ok(m) => check(m == msg, "the frame holds another message".into()),
                        Err(e) => check(false, format!("frame body does not decode: {e}")),
                    }
                    if t == MsgType::SessionTransfer {
                        let raw = match msg.payload_typed() {
                            Ok(Payload::SessionTransfer(st)) => st.data_bytes().unwrap(),
                            _ => vec![],
                        };
                        check(
                            fr.body.ends_with(&raw),
                            "session_transfer's chunk must follow the JSON raw".into(),
                        );
                    }
                }
                other => check(false, format!("frame_hex does not decode: {other:?}")),
            }
            // This encoder's exact bytes (another LZ4 encoder may produce a different, equally
            // valid block: decoding above is the interoperable check).
            match encode_message(&msg, true) {
                Ok(bytes) => check(
                    hex(&bytes) == c.frame_hex,
                    "this encoder frames it differently (bless?)".into(),
                ),
                Err(e) => check(false, format!("cannot frame: {e}")),
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        compressed_cases >= 4,
        "the fixtures must show compressed frames too"
    );
}

#[test]
fn fuzz_bodies_run_over_every_fixture_and_its_mutations() {
    for (_, f) in load_all() {
        for c in &f.cases {
            let line = c.line.as_bytes();
            let frame = unhex(&c.frame_hex);
            for input in [line.to_vec(), frame.clone()] {
                fuzz_bodies::relay_line(&input);
                fuzz_bodies::frame_decoder(&input);
                // Truncations, bit flips, and a prefix byte that picks another split point.
                for cut in [
                    input.len().min(1),
                    input.len() / 2,
                    input.len().saturating_sub(1),
                ] {
                    fuzz_bodies::relay_line(&input[..cut]);
                    fuzz_bodies::frame_decoder(&input[..cut]);
                }
                for i in (0..input.len()).step_by(input.len() / 16 + 1) {
                    let mut m = input.clone();
                    m[i] ^= 0x41;
                    fuzz_bodies::relay_line(&m);
                    fuzz_bodies::frame_decoder(&m);
                }
            }
        }
    }
}

#[test]
fn an_lz4_bomb_is_refused_without_allocating() {
    let bombs: Vec<Vec<u8>> = [u32::MAX, (4 << 20) + 1, 1 << 30]
        .into_iter()
        .map(|declared| {
            let mut body = declared.to_le_bytes().to_vec();
            body.extend_from_slice(&[0x1f, 0x00, 0x01, 0x00]);
            let mut f = ((body.len() + 1) as u32).to_be_bytes().to_vec();
            f.push(FLAG_LZ4);
            f.extend_from_slice(&body);
            f
        })
        .collect();
    for bomb in bombs {
        LARGEST_BYTES.with(|m| m.set(0));
        let r = decode_frame(&bomb);
        let largest = LARGEST_BYTES.with(Cell::get);
        assert!(r.is_err(), "{r:?}");
        assert!(largest < 4096, "decoding a bomb allocated {largest} bytes");
    }
    // A frame header announcing 1 MiB allocates nothing before its bytes arrive.
    let mut d = agent_hub_proto::relay::frame::FrameDecoder::new();
    LARGEST_BYTES.with(|m| m.set(0));
    d.push(&[0, 0x10, 0, 0, 0]);
    assert_eq!(d.next_frame(), Ok(None));
    assert!(LARGEST_BYTES.with(Cell::get) < 4096);
}

/// Each case's frame read back is its line again, and its line made raw is its frame again:
/// a `session_transfer` read from a frame holds its chunk raw and writes it as the same base64
/// `data`; read from a line and made raw, it frames to the same bytes; its typed payload is the
/// same either way.
#[test]
fn every_case_converts_between_its_line_and_its_frame_in_either_direction() {
    let mut problems = Vec::new();
    let mut transfers = 0;
    for (path, f) in load_all() {
        for c in &f.cases {
            let at = format!("{} case {}", path.display(), c.name);
            let mut want_line = c.line.clone().into_bytes();
            want_line.push(b'\n');
            let frame = unhex(&c.frame_hex);
            let Ok(Some((fr, _))) = decode_frame(&frame) else {
                problems.push(format!("{at}: frame_hex does not decode"));
                continue;
            };
            let from_frame = decode_body(&fr.body).unwrap();
            let mut from_line = RelayMessage::decode_line(c.line.as_bytes()).unwrap();
            if from_frame.encode_line() != want_line {
                problems.push(format!("{at}: frame -> line is not the fixture's line"));
            }
            let typed_line = from_line.payload_typed().map_err(|e| e.to_string());
            if from_frame.payload_typed().map_err(|e| e.to_string()) != typed_line {
                problems.push(format!(
                    "{at}: frame and line give different typed payloads"
                ));
            }
            if let Ok(p) = &typed_line {
                if p.to_value() != from_line.payload {
                    problems.push(format!("{at}: typed payload -> line payload differs"));
                }
            }
            if f.msg_type == "session_transfer" {
                transfers += 1;
                if from_frame.chunk().is_none() || from_frame.payload.get("data").is_some() {
                    problems.push(format!("{at}: a framed chunk must come back raw"));
                }
                from_line.make_chunk_raw().unwrap();
                if from_line.chunk() != from_frame.chunk() {
                    problems.push(format!("{at}: line made raw holds another chunk"));
                }
            }
            if hex(&encode_message(&from_line, true).unwrap()) != c.frame_hex {
                problems.push(format!(
                    "{at}: line (made raw) -> frame is not the fixture's frame"
                ));
            }
            if hex(&encode_message(&from_frame, true).unwrap()) != c.frame_hex {
                problems.push(format!("{at}: frame -> frame is not the fixture's frame"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        transfers > 0,
        "the fixtures must have a session_transfer case"
    );
}

/// Rewrites every case's `frame_hex` and `frame_compressed` from its line.
#[test]
#[ignore]
fn bless() {
    for (path, mut f) in load_all() {
        for c in &mut f.cases {
            let msg = RelayMessage::decode_line(c.line.as_bytes()).unwrap();
            let bytes = encode_message(&msg, true).unwrap();
            c.frame_compressed = bytes[4] & FLAG_LZ4 != 0;
            c.frame_hex = hex(&bytes);
        }
        let mut text = serde_json::to_string_pretty(&f).unwrap();
        text.push('\n');
        std::fs::write(&path, text).unwrap();
    }
}

// ----- claudectl 0.92.4, recorded (protocol/relay/claudectl/, format in its README) -----

fn hex_bytes(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn recording() -> Value {
    let p = dir().join("claudectl/0.92.4.json");
    serde_json::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap()
}

fn records<'a>(f: &'a Value, side: &str) -> &'a [Value] {
    f[side].as_array().unwrap()
}

fn record<'a>(f: &'a Value, side: &str, dir_: &str, msg_type: &str) -> &'a Value {
    records(f, side)
        .iter()
        .find(|r| r["dir"] == dir_ && r["msg_type"] == msg_type)
        .unwrap_or_else(|| panic!("{side}: no {dir_} {msg_type}"))
}

fn session_cfg(f: &Value) -> agent_hub_proto::relay::SessionConfig {
    use agent_hub_proto::relay::{SessionConfig, WallClock};
    let mut c = SessionConfig::new(
        f["our_peer_id"].as_str().unwrap(),
        "0.1.0",
        WallClock {
            at: std::time::Instant::now(),
            unix_ms: 1_796_411_472_000,
        },
    );
    // The recording hub's `relay.features`, settled as its config loader settles them
    // (`liveness` and `frame-mac` added).
    let mut features: Vec<Feature> = f["our_relay_features"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| Feature::parse(n.as_str().unwrap()).unwrap())
        .collect();
    features.extend([Feature::FrameMac, Feature::Liveness]);
    c.features = features;
    c
}

fn key_of(f: &Value) -> [u8; 32] {
    hex_bytes(f["key_hex"].as_str().unwrap())
        .try_into()
        .unwrap()
}

fn nonce_bytes(challenge_json: &str) -> [u8; 32] {
    let v: Value = serde_json::from_str(challenge_json).unwrap();
    hex_bytes(v["payload"]["nonce"].as_str().unwrap())
        .try_into()
        .unwrap()
}

fn payload_of(json: &str) -> Value {
    serde_json::from_str::<Value>(json).unwrap()["payload"].clone()
}

/// Every frame claudectl 0.92.4 and this hub exchanged decodes, in claudectl's body form (JSON
/// alone), to the message recorded; compressed ones declare 1 KiB or more; this hub's own
/// frames are exactly what its encoder makes of their message.
#[test]
fn claudectl_092_recording_frames_decode() {
    use agent_hub_proto::relay::frame::{decode_body_as, encode_message_as, BodyForm};
    let f = recording();
    let mut compressed = [0, 0];
    for side in ["we_dial", "they_dial"] {
        for r in records(&f, side).iter().filter(|r| r["kind"] == "frame") {
            let bytes = hex_bytes(r["hex"].as_str().unwrap());
            let (frame, n) = decode_frame(&bytes).unwrap().expect("a whole frame");
            assert_eq!(n, bytes.len());
            assert_eq!(frame.compressed(), r["compressed"] == true, "{side} {r}");
            if frame.compressed() {
                assert!(frame.body.len() >= COMPRESS_MIN_BYTES);
                assert_eq!(Some(frame.body.len() as u64), r["raw_len"].as_u64());
                compressed[usize::from(r["dir"] == "to_hub")] += 1;
            }
            let msg = decode_body_as(&frame.body, BodyForm::Json).unwrap();
            let want: Value = serde_json::from_str(r["json"].as_str().unwrap()).unwrap();
            assert_eq!(
                serde_json::from_slice::<Value>(&msg.encode_json()).unwrap(),
                want
            );
            msg.payload_typed()
                .unwrap_or_else(|e| panic!("{side} {}: {e}", r["msg_type"]));
            if r["dir"] == "to_ctl" {
                assert_eq!(
                    encode_message_as(&msg, true, BodyForm::Json).unwrap(),
                    bytes,
                    "{side}: our frame of {}",
                    r["msg_type"]
                );
            }
        }
    }
    assert_eq!(compressed, [1, 1], "one compressed frame each way");
}

/// claudectl 0.92.4's one-shot dial (`relay delegate`), replayed against our acceptor with the
/// recorded nonce: the same ack, a transient link in claudectl's dialect, and its compressed
/// `delegate_task` read.
#[test]
fn claudectl_092_recording_their_dial_replays() {
    use agent_hub_proto::relay::{Dialect, Session, SessionEvent};
    let f = recording();
    let key = key_of(&f);
    let ch = record(&f, "they_dial", "to_ctl", "challenge");
    let peer = f["their_peer_id"].as_str().unwrap().to_owned();
    let keys = std::collections::HashMap::from([(
        peer,
        agent_hub_proto::relay::PeerAuth {
            key,
            allow_claudectl: true,
            forward: false,
        },
    )]);
    let now = std::time::Instant::now();
    let mut a = Session::acceptor(
        session_cfg(&f),
        keys,
        nonce_bytes(ch["json"].as_str().unwrap()),
        1,
        now,
    );
    let mut ours = Vec::new();
    while let Some(b) = a.poll_transmit() {
        ours.extend(b);
    }
    assert_eq!(
        payload_of(std::str::from_utf8(&ours).unwrap().trim_end()),
        payload_of(ch["json"].as_str().unwrap())
    );
    let hs = record(&f, "they_dial", "to_hub", "handshake");
    a.handle_input(&hex_bytes(hs["hex"].as_str().unwrap()), now);
    let mut ack = Vec::new();
    while let Some(b) = a.poll_transmit() {
        ack.extend(b);
    }
    let want_ack = record(&f, "they_dial", "to_ctl", "handshake_ack");
    assert_eq!(
        payload_of(std::str::from_utf8(&ack).unwrap().trim_end()),
        payload_of(want_ack["json"].as_str().unwrap())
    );
    let d = record(&f, "they_dial", "to_hub", "delegate_task");
    a.handle_input(&hex_bytes(d["hex"].as_str().unwrap()), now);
    let evs: Vec<SessionEvent> = std::iter::from_fn(|| a.poll_event()).collect();
    assert!(
        evs.iter().any(|e| matches!(
            e,
            SessionEvent::Established {
                proto: 1,
                dialect: Dialect::Claudectl,
                transient: true,
                ..
            }
        )),
        "{evs:?}"
    );
    let task = evs
        .iter()
        .find_map(|e| match e {
            SessionEvent::Message(m) if m.msg_type == MsgType::DelegateTask => Some(m),
            _ => None,
        })
        .expect("the delegate_task");
    assert!(task.payload["prompt"].as_str().unwrap().len() > 1024);
}

/// Our dial to claudectl 0.92.4's serve, replayed: the recorded challenge gets the very
/// handshake we sent (the nonce proof, `proto` 1, our offer), its ack a claudectl-dialect v1
/// link with `frame-bin` and `headroom`, and its beat and handoff are read.
#[test]
fn claudectl_092_recording_our_dial_replays() {
    use agent_hub_proto::relay::{Dialect, PeerAuth, Session, SessionEvent};
    let f = recording();
    let key = key_of(&f);
    let hs_rec = record(&f, "we_dial", "to_ctl", "handshake");
    let hs_payload = payload_of(hs_rec["json"].as_str().unwrap());
    let mut cfg = session_cfg(&f);
    cfg.listen_port = hs_payload["listen_port"].as_u64().map(|p| p as u16);
    let now = std::time::Instant::now();
    let mut d = Session::dialer(
        cfg,
        f["their_peer_id"].as_str().unwrap(),
        PeerAuth {
            key,
            allow_claudectl: true,
            forward: false,
        },
        [0x11; 32],
        1,
        now,
    );
    let ch = record(&f, "we_dial", "to_hub", "challenge");
    d.handle_input(&hex_bytes(ch["hex"].as_str().unwrap()), now);
    let mut ours = Vec::new();
    while let Some(b) = d.poll_transmit() {
        ours.extend(b);
    }
    assert_eq!(
        payload_of(std::str::from_utf8(&ours).unwrap().trim_end()),
        hs_payload,
        "the same handshake, proof included"
    );
    let mut theirs = Vec::new();
    for t in ["handshake_ack", "heartbeat", "task_handoff"] {
        theirs.extend(hex_bytes(
            record(&f, "we_dial", "to_hub", t)["hex"].as_str().unwrap(),
        ));
    }
    d.handle_input(&theirs, now);
    let evs: Vec<SessionEvent> = std::iter::from_fn(|| d.poll_event()).collect();
    let est = evs.iter().find_map(|e| match e {
        SessionEvent::Established {
            proto,
            features,
            dialect,
            ..
        } => Some((*proto, features.clone(), *dialect)),
        _ => None,
    });
    assert_eq!(
        est,
        Some((
            1,
            vec![Feature::UnknownOk, Feature::FrameBin, Feature::Headroom],
            Dialect::Claudectl
        ))
    );
    let worker = evs
        .iter()
        .find_map(|e| match e {
            SessionEvent::Heartbeat { worker, .. } => worker.clone(),
            _ => None,
        })
        .expect("what claudectl's beat said");
    let caps = worker.capabilities.expect("capabilities");
    assert_eq!(caps.claudectl_version, "0.92.4");
    assert!(caps.tools.contains_key("claude"));
    assert!(worker.headroom.is_some_and(|h| h.max_tasks == Some(4)));
    // Placement reads the same beat's room (issue 38 design §11 D: claudectl 0.92.4's beat
    // read for placement): its figures as the capture has them.
    let room = evs
        .iter()
        .find_map(|e| match e {
            SessionEvent::Heartbeat { room, .. } => room.clone(),
            _ => None,
        })
        .expect("the room of claudectl's beat");
    assert_eq!(
        (
            room.mem_free_mb,
            room.disk_free_mb,
            room.running_tasks,
            room.max_tasks
        ),
        (Some(21460), Some(73993), 0, Some(4))
    );
    assert_eq!(room.load_per_core, Some(1.265));
    assert!(evs
        .iter()
        .any(|e| matches!(e, SessionEvent::Message(m) if m.msg_type == MsgType::TaskHandoff)));
}
