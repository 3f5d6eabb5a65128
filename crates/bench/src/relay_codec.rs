//! The relay codec table: each payload's raw, line, frame and LZ4 sizes and encode/decode
//! times, plus the heartbeat and transfer payloads it uses.

use crate::base::Res;
use crate::relay_corpus::{
    prose, Rng, BUS_BODY_119, BUS_BODY_29, PATHS, RELAY_T0_MS, TOOLS, WORDS,
};
use crate::stats::us;
use agent_hub_proto::relay::frame::{encode_frame, encode_message, FLAG_LZ4};
use agent_hub_proto::relay::heartbeat::{AgentEntry, Beat, Directory};
use agent_hub_proto::relay::{MsgType, RelayMessage};
use serde_json::json;
use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

/// A directory of `n` agents named as a hub's roster might name them.
pub(crate) fn beat_directory(n: usize) -> Directory {
    const ROLES: &[&str] = &[
        "impl", "reviewer", "tester", "docs", "planner", "triage", "fuzzer", "release", "bench",
        "security",
    ];
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let agents = (0..n)
        .map(|i| {
            let name = format!("{}-{}", ROLES[i % ROLES.len()], i / ROLES.len() + 1);
            (
                name,
                AgentEntry {
                    parked: rng.below(2) as u32,
                    queued: rng.below(4) as u32,
                    ..Default::default()
                },
            )
        })
        .collect();
    Directory {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        agents,
    }
}

/// The 7.5 KB heartbeat of the issue-4 measurements (docs/performance.md "The payloads") carried
/// 5 claudectl sessions with their stats in `sessions[]`.
/// This builds a v1 full beat with a 5-agent directory and 5 such sessions (fields of the kind a
/// fleet dashboard shows: ids, project, status, model, tokens, cost, context, files touched,
/// recent tool calls, the last message), so the payload is of that size.
pub(crate) fn rich_heartbeat_payload() -> serde_json::Value {
    let mut rng = Rng(0xA076_1D64_78BD_642F);
    let directory = beat_directory(5);
    let mut v = Beat::Full {
        seq: Some(1),
        directory,
    }
    .to_payload("barrys-mac-74371ce5", RELAY_T0_MS);
    let sessions: Vec<serde_json::Value> = (0..5)
        .map(|i| {
            let project = *rng.pick(&["agent-hub", "claudectl", "website", "infra", "mobile-app"]);
            let files: Vec<String> = (0..rng.range(4, 9)).map(|_| rng.pick(PATHS).to_string()).collect();
            let tools: Vec<serde_json::Value> = (0..6)
                .map(|k| json!({"tool": *rng.pick(TOOLS), "target": *rng.pick(PATHS), "at_ms": RELAY_T0_MS - 4000 * k, "ok": true}))
                .collect();
            json!({
                "pid": 40_000 + rng.below(20_000), "session_id": rng.uuid(), "agent": "claude",
                "project": project, "cwd": format!("/Users/barry/src/{project}"),
                "status": *rng.pick(&["Processing", "WaitingInput", "Idle", "Processing"]),
                "model": "claude-sonnet-4-5-20250929", "git_branch": format!("feat/{}", rng.skewed(WORDS)),
                "started_at_ms": RELAY_T0_MS - 1000 * rng.range(60, 20_000) as i64, "last_activity_ms": RELAY_T0_MS - rng.range(0, 30_000) as i64,
                "elapsed_secs": rng.range(60, 20_000),
                "tokens": {"input": rng.range(1000, 90_000), "output": rng.range(1000, 60_000), "cache_read": rng.range(100_000, 9_000_000), "cache_write": rng.range(10_000, 400_000)},
                "cost_usd": rng.range(10, 2500) as f64 / 100.0, "context_pct": rng.range(5, 95) as f64, "burn_rate_usd_per_hr": rng.range(50, 900) as f64 / 100.0,
                "files_modified": files, "recent_tools": tools,
                "last_message": prose(&mut rng, 25, 45),
                "subagents": rng.below(3), "tty": format!("/dev/ttys00{i}"),
            })
        })
        .collect();
    v["sessions"] = json!(sessions);
    v
}

/// A `session_transfer` payload without its chunk, for chunk `seq` of `total` of a file whose
/// SHA-256 is `digest`: the chunk goes beside it raw (`RelayMessage::with_chunk`), as an
/// application holding the file's bytes sends it.
pub(crate) fn transfer_head(seq: usize, total: usize, digest: &str) -> serde_json::Value {
    json!({
        "session_id": "5f0c1d2e-8a4b-4c6d-9e7f-0a1b2c3d4e5f", "cwd": "/home/dev/agent-hub",
        "seq": seq, "total": total, "digest": digest,
    })
}

pub(crate) fn task_status_payload() -> serde_json::Value {
    json!({
        "task_id": "task_7f3a9c21", "state": "running",
        "stats": {"tokens_used": 48_213, "cost_usd": 0.7342, "context_pct": 41.5,
                  "files_modified": ["src/relay/frame.rs", "docs/performance.md"],
                  "elapsed_secs": 312, "last_activity": "Edit src/relay/frame.rs"},
    })
}

/// Median time of one call of `f` in µs: `samples` timed batches, each of enough calls to
/// last at least 20 µs (so the clock's grain does not matter for small payloads).
pub(crate) fn median_us(samples: usize, mut f: impl FnMut()) -> f64 {
    let mut k = 1usize;
    loop {
        let t = Instant::now();
        for _ in 0..k {
            f();
        }
        if t.elapsed() >= Duration::from_micros(20) || k >= 1 << 20 {
            break;
        }
        k *= 2;
    }
    let mut v: Vec<f64> = (0..samples)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..k {
                f();
            }
            us(t.elapsed()) / k as f64
        })
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// What `frame::decode_frame` does with a compressed body: read the declared size, allocate
/// the output, decompress into it (lz4_flex, safe-decode + checked-decode as Cargo.toml has it).
pub(crate) fn lz4_decode(block: &[u8]) -> Vec<u8> {
    let declared = u32::from_le_bytes([block[0], block[1], block[2], block[3]]) as usize;
    let mut out = vec![0u8; declared];
    let n = lz4_flex::block::decompress_into(&block[4..], &mut out).expect("a valid block");
    out.truncate(n);
    out
}

/// One row of the codec table.
pub(crate) struct CodecRow {
    pub(crate) label: String,
    pub(crate) raw: usize,
    /// lz4_flex block alone.
    pub(crate) block: usize,
    /// As `frame::decode_frame` does it: allocate the output, then decompress.
    pub(crate) decode_us: f64,
    pub(crate) encode_us: f64,
    /// The relay message that carries this payload: its name, its frame body's size, and
    /// whether `encode_frame` with lz4 agreed compresses it (the 1 KiB threshold, and only when
    /// smaller).
    pub(crate) carrier: String,
    pub(crate) carrier_body: usize,
    pub(crate) carrier_lz4: bool,
}

pub(crate) fn codec_row(
    label: &str,
    raw: &[u8],
    carrier: &str,
    carrier_body: &[u8],
) -> Res<CodecRow> {
    let framed = lz4_flex::block::compress_prepend_size(raw);
    if lz4_decode(&framed) != raw {
        return Err(format!("lz4 round trip of {label} differs"));
    }
    let samples = if raw.len() > 64 * 1024 { 501 } else { 301 };
    let decode_us = median_us(samples, || {
        black_box(lz4_decode(black_box(&framed)));
    });
    let encode_us = median_us(samples, || {
        black_box(lz4_flex::block::compress_prepend_size(black_box(raw)));
    });
    let frame = encode_frame(carrier_body, true).map_err(|e| format!("{label}: {e}"))?;
    Ok(CodecRow {
        label: label.to_owned(),
        raw: raw.len(),
        block: framed.len() - 4,
        decode_us,
        encode_us,
        carrier: carrier.to_owned(),
        carrier_body: carrier_body.len(),
        carrier_lz4: frame[4] & FLAG_LZ4 != 0,
    })
}

pub(crate) fn relay_msg(t: MsgType, from: &str, payload: serde_json::Value) -> RelayMessage {
    RelayMessage::new(
        format!("msg_{RELAY_T0_MS}_17_3f9a0c4d2b7e8f15"),
        t,
        from,
        RELAY_T0_MS,
        payload,
    )
}

/// The three payload kinds of the LZ4 table (docs/performance.md "1. LZ4 on the seed's payload
/// kinds") (the bus message and the heartbeat each in
/// two sizes), and for the transcript how v0's base64 line compares with our LZ4 frame.
pub(crate) fn codec_table(
    transcript: &[u8],
    dump: Option<&Path>,
) -> Res<(Vec<CodecRow>, serde_json::Value)> {
    let from = "barrys-mac-74371ce5";
    // The seed's §8 sketch of a forwarded bus message (bus-forward is not built yet): what a
    // frame would carry for a bus message.
    let forward = |body: &str| {
        relay_msg(
            MsgType::Unknown("bus_forward".into()),
            from,
            json!({"to": "reviewer@baradas-mac-mini-508f9c0e", "from": "impl@barrys-mac-74371ce5",
                   "subject": "review.request", "type": "request", "body": body, "hop": 1,
                   "msg_id": "0b6e2f4a-3c1d-4e5f-8a9b-7c6d5e4f3a2b"}),
        )
        .encode_json()
    };
    let beat5 = Beat::Full {
        seq: Some(1),
        directory: beat_directory(5),
    }
    .to_payload(from, RELAY_T0_MS);
    let beat5_bytes = serde_json::to_vec(&beat5).map_err(|e| e.to_string())?;
    let rich = rich_heartbeat_payload();
    let rich_bytes = serde_json::to_vec(&rich).map_err(|e| e.to_string())?;
    let hb = |p: &serde_json::Value| relay_msg(MsgType::Heartbeat, from, p.clone()).encode_json();
    let digest = {
        use sha2::Digest;
        agent_hub_proto::relay::auth::to_hex(&sha2::Sha256::digest(transcript))
    };
    let transfer = relay_msg(MsgType::SessionTransfer, from, transfer_head(0, 1, &digest))
        .with_chunk(transcript);
    let transfer_body =
        agent_hub_proto::relay::frame::encode_body(&transfer).map_err(|e| e.to_string())?;
    let fwd29 = forward(BUS_BODY_29);
    let fwd119 = forward(BUS_BODY_119);
    if let Some(dir) = dump {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        for (name, bytes) in [
            ("bus-body-29.txt", BUS_BODY_29.as_bytes()),
            ("bus-body-119.txt", BUS_BODY_119.as_bytes()),
            ("bus-forward-119.json", &fwd119[..]),
            ("heartbeat-5-agents.json", &beat5_bytes[..]),
            ("heartbeat-5-agents-5-sessions.json", &rich_bytes[..]),
            ("transcript-512k.jsonl", transcript),
        ] {
            let p = dir.join(name);
            std::fs::write(&p, bytes).map_err(|e| format!("{}: {e}", p.display()))?;
        }
    }
    let rows = vec![
        codec_row(
            "bus message body, 29 B (seed's average)",
            BUS_BODY_29.as_bytes(),
            "bus_forward message (seed §8 sketch)",
            &fwd29,
        )?,
        codec_row(
            "bus message body, 119 B (seed's largest)",
            BUS_BODY_119.as_bytes(),
            "bus_forward message (seed §8 sketch)",
            &fwd119,
        )?,
        codec_row(
            "bus_forward message with the 119 B body",
            &fwd119,
            "itself",
            &fwd119,
        )?,
        codec_row(
            "heartbeat, 5 agents (our v1 full beat)",
            &beat5_bytes,
            "heartbeat message",
            &hb(&beat5),
        )?,
        codec_row(
            "heartbeat, 5 agents + 5 rich sessions",
            &rich_bytes,
            "heartbeat message",
            &hb(&rich),
        )?,
        codec_row(
            "transcript 512 KiB (synthetic JSONL)",
            transcript,
            "one 512 KiB session_transfer",
            &transfer_body,
        )?,
    ];
    let line = transfer.encode_line().len();
    let frame = encode_message(&transfer, true)
        .map_err(|e| e.to_string())?
        .len();
    let frame_raw = encode_message(&transfer, false)
        .map_err(|e| e.to_string())?
        .len();
    let transfer_wire = json!({"v0_line_bytes": line, "frame_bytes": frame_raw, "frame_lz4_bytes": frame,
        "line_over_frame_lz4": (line as f64 / frame as f64 * 100.0).round() / 100.0});
    Ok((rows, transfer_wire))
}

pub(crate) fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}
