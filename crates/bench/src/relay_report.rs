//! The relay section of the run (`--relay-only`, `--no-relay`): runs the relay measurements and
//! reports them as text and JSON.

use crate::base::progress;
use crate::base::Res;
use crate::options::Opts;
use crate::relay_codec::{
    codec_table, lz4_decode, median_us, relay_msg, task_status_payload, transfer_head, CodecRow,
};
use crate::relay_corpus::{
    synthetic_transcript, BEATS, BEAT_AGENTS, CHUNK_BYTES, TRANSCRIPT_BYTES,
};
use crate::relay_link::{beat_run, link_kinds, link_run, BeatRow, LinkRow, Workload};
use crate::stats::us;
use agent_hub_proto::relay::frame::{decode_body, encode_frame};
use agent_hub_proto::relay::{Feature, MsgType, RelayMessage};
use serde_json::json;
use std::fmt::Write as _;
use std::hint::black_box;
use std::sync::Arc;

#[derive(Default)]
pub(crate) struct RelayReport {
    pub(crate) transcript_lines: usize,
    pub(crate) codec: Vec<CodecRow>,
    pub(crate) transfer_wire: serde_json::Value,
    /// What the link's per-message steps cost for one 64 KiB chunk, median µs.
    pub(crate) steps: Vec<(&'static str, f64)>,
    pub(crate) links: Vec<LinkRow>,
    pub(crate) beats: Vec<BeatRow>,
}

/// The steps a 64 KiB `session_transfer` goes through on each kind of link, timed alone on one
/// thread, so the link figures can be read: where a chunk's CPU goes. The message holds its
/// chunk raw, as the link's sender gives it.
pub(crate) fn transfer_steps(
    head: &serde_json::Value,
    chunk: &Arc<[u8]>,
) -> Res<Vec<(&'static str, f64)>> {
    let msg =
        relay_msg(MsgType::SessionTransfer, "hubA", head.clone()).with_chunk(Arc::clone(chunk));
    let line = msg.encode_line();
    let from_line =
        RelayMessage::decode_line(&line[..line.len() - 1]).map_err(|e| e.to_string())?;
    let body = agent_hub_proto::relay::frame::encode_body(&msg).map_err(|e| e.to_string())?;
    let frame = encode_frame(&body, true).map_err(|e| e.to_string())?;
    let block = frame[5..].to_vec();
    let n = 201;
    Ok(vec![
        (
            "payload_typed (catalogue check; the chunk is raw: no base64)",
            median_us(n, || {
                black_box(black_box(&msg).payload_typed().is_ok());
            }),
        ),
        (
            "lines: encode_line (JSON + the sender's one base64 encode)",
            median_us(n, || {
                black_box(black_box(&msg).encode_line());
            }),
        ),
        (
            "lines: decode_line (JSON; data stays base64 text)",
            median_us(n, || {
                black_box(RelayMessage::decode_line(black_box(&line[..line.len() - 1])).is_ok());
            }),
        ),
        (
            "lines: make_chunk_raw (the receiver's one base64 decode)",
            median_us(n, || {
                let mut m = black_box(&from_line).clone();
                black_box(m.make_chunk_raw().is_ok());
            }),
        ),
        (
            "frames: encode_body (JSON head, raw tail)",
            median_us(n, || {
                black_box(agent_hub_proto::relay::frame::encode_body(black_box(&msg)).is_ok());
            }),
        ),
        (
            "frames: decode_body (JSON head, raw tail)",
            median_us(n, || {
                black_box(decode_body(black_box(&body)).is_ok());
            }),
        ),
        (
            "lz4: compress the body",
            median_us(n, || {
                black_box(lz4_flex::block::compress_prepend_size(black_box(&body)));
            }),
        ),
        (
            "lz4: decompress the body",
            median_us(n, || {
                black_box(lz4_decode(black_box(&block)));
            }),
        ),
    ])
}

pub(crate) fn relay_bench(opts: &Opts) -> Res<RelayReport> {
    progress("relay: building the payloads");
    let transcript = synthetic_transcript(TRANSCRIPT_BYTES);
    let mut r = RelayReport {
        transcript_lines: transcript.iter().filter(|&&b| b == b'\n').count(),
        ..RelayReport::default()
    };
    progress("relay 1: LZ4 ratio and decode time per payload kind");
    let (codec, transfer_wire) = codec_table(&transcript, opts.relay_dump.as_deref())?;
    r.codec = codec;
    r.transfer_wire = transfer_wire;

    let digest = {
        use sha2::Digest;
        agent_hub_proto::relay::auth::to_hex(&sha2::Sha256::digest(&transcript))
    };
    let total = TRANSCRIPT_BYTES / CHUNK_BYTES;
    let status = task_status_payload();
    let workloads = vec![
        Workload {
            name: "task_status (small)".into(),
            msg_type: MsgType::TaskStatus,
            payload_bytes: serde_json::to_vec(&status)
                .map_err(|e| e.to_string())?
                .len(),
            payloads: vec![status],
            chunks: vec![],
            count: opts.relay_messages,
        },
        Workload {
            name: "session_transfer, 64 KiB chunks".into(),
            msg_type: MsgType::SessionTransfer,
            payloads: (0..total)
                .map(|i| transfer_head(i, total, &digest))
                .collect(),
            chunks: transcript.chunks(CHUNK_BYTES).map(Arc::from).collect(),
            payload_bytes: CHUNK_BYTES,
            count: opts.relay_chunks,
        },
        Workload {
            name: "session_transfer, 512 KiB chunks".into(),
            msg_type: MsgType::SessionTransfer,
            payloads: vec![transfer_head(0, 1, &digest)],
            chunks: vec![Arc::from(&transcript[..])],
            payload_bytes: TRANSCRIPT_BYTES,
            count: (opts.relay_chunks / 8).max(1),
        },
    ];
    progress("relay 2: the steps of one 64 KiB chunk, timed alone");
    r.steps = transfer_steps(&workloads[1].payloads[0], &workloads[1].chunks[0])?;
    for w in &workloads {
        for (link, features) in link_kinds() {
            progress(&format!(
                "relay 2: loopback link, {link}, {} x {}",
                w.count, w.name
            ));
            r.links.push(link_run(link, &features, w)?);
        }
    }
    progress("relay 3: heartbeat bytes, full against delta, 50 agents");
    use agent_hub_proto::relay::Feature::{FrameBin, HbDelta, Lz4, MutualAuth, UnknownOk};
    let beat_kinds: Vec<(&'static str, Vec<Feature>)> = vec![
        ("lines", vec![UnknownOk, MutualAuth]),
        ("lines", vec![UnknownOk, MutualAuth, HbDelta]),
        ("frames", vec![UnknownOk, MutualAuth, FrameBin]),
        ("frames", vec![UnknownOk, MutualAuth, FrameBin, HbDelta]),
        ("frames + lz4", vec![UnknownOk, MutualAuth, FrameBin, Lz4]),
        (
            "frames + lz4",
            vec![UnknownOk, MutualAuth, FrameBin, Lz4, HbDelta],
        ),
    ];
    for (link, f) in beat_kinds {
        r.beats.push(beat_run(link, &f)?);
    }
    Ok(r)
}

impl RelayReport {
    pub(crate) fn to_json(&self, opts: &Opts) -> serde_json::Value {
        let codec: Vec<serde_json::Value> = self
            .codec
            .iter()
            .map(|c| {
                json!({
                    "payload": c.label, "raw_bytes": c.raw, "lz4_block_bytes": c.block,
                    "lz4_framed_bytes": c.block + 4,
                    "ratio": (c.raw as f64 / c.block as f64 * 100.0).round() / 100.0,
                    "ratio_framed": (c.raw as f64 / (c.block + 4) as f64 * 100.0).round() / 100.0,
                    "decode_us_median": (c.decode_us * 100.0).round() / 100.0,
                    "encode_us_median": (c.encode_us * 100.0).round() / 100.0,
                    "carrier": c.carrier, "carrier_body_bytes": c.carrier_body,
                    "carrier_compressed": c.carrier_lz4,
                })
            })
            .collect();
        json!({
            "options": {"relay_chunks": opts.relay_chunks, "relay_messages": opts.relay_messages},
            "transcript": {"bytes": TRANSCRIPT_BYTES, "lines": self.transcript_lines},
            "lz4_crate": "lz4_flex 0.10 (safe-encode, safe-decode, checked-decode)",
            "codec": codec,
            "transcript_transfer_wire": self.transfer_wire,
            "link": self.links.iter().map(LinkRow::to_json).collect::<Vec<_>>(),
            "chunk_64k_steps_us_median": self.steps.iter().map(|(k, v)| (k.to_string(), json!((v * 10.0).round() / 10.0))).collect::<serde_json::Map<_, _>>(),
            "heartbeat": {"agents": BEAT_AGENTS, "changed_per_beat": 1, "beats": BEATS,
                          "runs": self.beats.iter().map(BeatRow::to_json).collect::<Vec<_>>()},
        })
    }

    pub(crate) fn to_table(&self, opts: &Opts) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "relay 1: LZ4 (lz4_flex block, as frames carry it) on the seed's §7.2 payload kinds"
        );
        let _ = writeln!(
            t,
            "{:<42} {:>7} {:>7} {:>6} {:>8} {:>9} {:>9}  in our frames (lz4 agreed, 1 KiB threshold)",
            "payload", "raw B", "lz4 B", "ratio", "+size", "decode µs", "encode µs"
        );
        for c in &self.codec {
            let _ = writeln!(
                t,
                "{:<42} {:>7} {:>7} {:>5.2}x {:>7.2}x {:>9.2} {:>9.2}  {}: {} B body, {}",
                c.label,
                c.raw,
                c.block,
                c.raw as f64 / c.block as f64,
                c.raw as f64 / (c.block + 4) as f64,
                c.decode_us,
                c.encode_us,
                c.carrier,
                c.carrier_body,
                if c.carrier_lz4 {
                    "compressed"
                } else {
                    "sent raw"
                }
            );
        }
        let w = &self.transfer_wire;
        let _ = writeln!(
            t,
            "  the 512 KiB transcript as one session_transfer: v0 base64 line {} B, frame {} B, frame with lz4 {} B ({}x less than the line)",
            w["v0_line_bytes"], w["frame_bytes"], w["frame_lz4_bytes"], w["line_over_frame_lz4"]
        );
        let _ = writeln!(t, "  ratio: raw / lz4 block; +size: raw / (block + the 4-byte raw size a frame body carries); µs: median of timed batches;");
        let _ = writeln!(
            t,
            "  decode: allocate the output and decompress into it, as frame::decode_frame does"
        );
        let _ = writeln!(t);
        let _ = writeln!(t, "relay 2: one direction over 127.0.0.1 TCP, Session::send -> poll_transmit -> socket -> handle_input -> Message event");
        let _ = writeln!(
            t,
            "{:<34} {:<22} {:>7} {:>7} {:>9} {:>10} {:>9} {:>9} {:>8} {:>8}",
            "workload",
            "link",
            "msgs",
            "wall s",
            "frames/s",
            "payload MB/s",
            "wire B/msg",
            "wire MB/s",
            "send µs",
            "recv µs"
        );
        for l in &self.links {
            let _ = writeln!(
                t,
                "{:<34} {:<22} {:>7} {:>7.2} {:>9.0} {:>10.1} {:>9.0} {:>9.1} {:>8.1} {:>8.1}",
                l.workload,
                l.link,
                l.msgs,
                l.wall.as_secs_f64(),
                l.per_sec(),
                l.payload_mb_s(),
                l.wire_bytes as f64 / l.msgs as f64,
                l.wire_mb_s(),
                us(l.send_cpu) / l.msgs as f64,
                us(l.recv_cpu) / l.msgs as f64
            );
        }
        let _ = writeln!(t, "  payload: the raw chunk (transfers) or the payload object's JSON (task_status); MB = 10^6 bytes; send/recv µs: each thread's CPU per message");
        let _ = writeln!(t, "  one 64 KiB chunk's steps, timed alone (median µs):");
        for (k, v) in &self.steps {
            let _ = writeln!(t, "    {k:<68} {v:>8.1}");
        }
        let _ = writeln!(t, "  counts: --relay-messages {} task_status, --relay-chunks {} 64 KiB chunks, {} 512 KiB chunks; every link also agreed unknown-ok, mutual-auth, hb-delta", opts.relay_messages, opts.relay_chunks, (opts.relay_chunks / 8).max(1));
        let _ = writeln!(t);
        let _ = writeln!(t, "relay 3: heartbeat bytes on the wire, {BEAT_AGENTS}-agent directory, one agent's count changes before each beat, {BEATS} beats (full every 10th under hb-delta)");
        let _ = writeln!(
            t,
            "{:<14} {:<42} {:>9} {:>9} {:>6} {:>11} {:>14}",
            "link", "features", "full B", "delta B", "ack B", "mean B/beat", "with acks B/beat"
        );
        for b in &self.beats {
            let opt = |v: Option<usize>| v.map_or("-".to_owned(), |v| v.to_string());
            let _ = writeln!(
                t,
                "{:<14} {:<42} {:>9} {:>9} {:>6} {:>11.0} {:>14.0}",
                b.link,
                b.features,
                b.full(),
                opt(b.delta()),
                opt(b.ack()),
                b.mean_beat(),
                b.mean_with_acks()
            );
        }
        if let Some(b) = self.beats.iter().find(|b| b.delta_payload.is_some()) {
            let _ = writeln!(t, "  payload JSON alone: full {} B, delta {} B; sizes include the envelope and the line's \\n or the frame's 5-byte header", b.full_payload, b.delta_payload.unwrap_or(0));
        }
        t
    }
}
