//! The scale phase's throwaway hubs (issue 13, docs/performance.md "How cost grows with
//! work"): a directory per hub with its own roster (a few names, or thousands), config (the
//! bench's, with caps raised for a million queued envelopes) and SQLite file, and the SQLite
//! store pre-filled through the hub's own `store::sqlite` writer, so a restart loads exactly
//! what a hub that accepted those envelopes would have written.

use crate::base::Res;
use crate::client::{join_all, now_ts, send_once, split};
use crate::fixtures::{bench_config, write_private, Agent};
use crate::hub_process::HubProcess;
use crate::options::{Opts, StoreKind, DB_FILE, SQLITE_MAX_BYTES};
use agent_hub_proto::wire::{ClientLine, Envelope, Hello};
use agent_hub_server::store::sqlite::Sqlite;
use agent_hub_server::store::{Store, StoreOp};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The agent whose queue holds the long queue; `SENDER` sends everything.
pub(crate) const BULK: &str = "scale-bulk";
pub(crate) const SENDER: &str = "scale-sender";
/// How long a scale hub gets to print its ready line.
const SCALE_READY_TIMEOUT: Duration = Duration::from_secs(600);
/// Rows per transaction when pre-filling the store.
const FILL_BATCH: usize = 20_000;

/// The id of the fixture's envelope `seq` (`ScaleHub::fill_store`).
pub(crate) fn fixture_id(seq: usize) -> String {
    format!("00000000-0000-4000-8000-{seq:012x}")
}

/// One scale hub's files.
pub(crate) struct ScaleHub {
    pub(crate) config: PathBuf,
    pub(crate) db: PathBuf,
    pub(crate) stderr: PathBuf,
    pub(crate) agents: HashMap<String, Agent>,
}

impl ScaleHub {
    /// Writes a hub in `parent/label` with `SENDER`, `BULK` and `extra` agents `a0..`.
    pub(crate) fn write(
        parent: &Path,
        label: &str,
        opts: &Opts,
        kind: StoreKind,
        extra: usize,
    ) -> Res<ScaleHub> {
        let dir = parent.join(label);
        std::fs::create_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let mut roster = String::from("[agents]\n");
        let mut agents = HashMap::new();
        let names = [SENDER.to_owned(), BULK.to_owned()]
            .into_iter()
            .chain((0..extra).map(|i| format!("a{i}")));
        for name in names {
            let token = uuid::Uuid::new_v4().simple().to_string();
            let _ = writeln!(roster, "{name} = \"{token}\"");
            let hello = ClientLine::Hello(Hello::new(name.clone(), token)).encode();
            agents.insert(
                name.clone(),
                Agent {
                    name,
                    hello: Arc::from(hello.into_bytes()),
                },
            );
        }
        write_private(&dir.join("roster.toml"), &roster)?;
        let mut doc: toml::Table =
            toml::from_str(&bench_config(opts, kind)?).map_err(|e| format!("bench config: {e}"))?;
        let most = (opts
            .scale_restart
            .max(opts.scale_queue)
            .max(2 * opts.scale_memory)
            + 4 * opts.scale_ops
            + 1_000) as i64;
        if let Some(limits) = doc.get_mut("limits").and_then(toml::Value::as_table_mut) {
            for (key, value) in [
                ("queue_max_envelopes", most),
                ("idempotency_max_ids", 2 * most),
                ("queue_max_bytes", 64 << 30),
                ("hub_max_bytes", 64 << 30),
            ] {
                if limits.contains_key(key) {
                    limits.insert(key.into(), toml::Value::Integer(value));
                }
            }
        }
        let config = dir.join("config.toml");
        let text = toml::to_string(&doc).map_err(|e| format!("config: {e}"))?;
        write_private(&config, &text)?;
        Ok(ScaleHub {
            db: dir.join(DB_FILE),
            stderr: dir.join("server-stderr.txt"),
            config,
            agents,
        })
    }

    pub(crate) fn agent(&self, name: &str) -> Res<&Agent> {
        self.agents
            .get(name)
            .ok_or_else(|| format!("no agent {name} in the scale roster"))
    }

    pub(crate) fn start(&self, server: &Path) -> Res<HubProcess> {
        // A million queued envelopes are read before the ready line; on a machine shared
        // with builds that can take minutes of wall time.
        HubProcess::start_within(server, &self.config, &self.stderr, SCALE_READY_TIMEOUT)
    }

    /// Writes `n` queued envelopes from `SENDER` to `BULK` (bodies of about `body_bytes`)
    /// into this hub's SQLite file, as the hub itself would have. The ids are UUIDs in their
    /// canonical text, numbered by seq, as `agent-hub send` makes them (random there): the
    /// hub holds those inline (`hub::id_key`), so a fixture of short text ids would measure
    /// a hub no client of ours fills.
    pub(crate) fn fill_store(&self, n: usize, body_bytes: usize) -> Res<()> {
        let mut store =
            Sqlite::open(&self.db, SQLITE_MAX_BYTES as u64).map_err(|e| e.to_string())?;
        store.load().map_err(|e| e.to_string())?;
        let ts = now_ts();
        let now_ms = chrono::Utc::now().timestamp_millis();
        let mut ops = Vec::with_capacity(FILL_BATCH);
        for seq in 0..n {
            let id = fixture_id(seq);
            let body = body_of(body_bytes, seq);
            let env = Envelope::new(
                id.clone(),
                SENDER.into(),
                BULK.into(),
                ts.clone(),
                "task".into(),
                None,
                body.clone(),
            )
            .map_err(|e| format!("envelope: {e}"))?;
            ops.push(StoreOp::Insert {
                seq: seq as u64,
                agent: BULK.into(),
                id,
                sender: SENDER.into(),
                kind: "task".into(),
                correlation_id: None,
                text: Arc::from(env.to_json()),
                digest: agent_hub_proto::hub::ledger::digest(BULK, "task", None, &body),
                accepted_ms: now_ms,
            });
            if ops.len() == FILL_BATCH || seq + 1 == n {
                store.stage(&ops).map_err(|e| e.to_string())?;
                store.commit().map_err(|e| e.to_string())?;
                ops.clear();
            }
        }
        Ok(())
    }
}

/// A JSON body of exactly `bytes` bytes (at least a small minimum), distinct per `seq`.
pub(crate) fn body_of(bytes: usize, seq: usize) -> String {
    let head = format!("{{\"seq\":{seq},\"pad\":\"");
    let tail = "\"}";
    let pad = bytes.saturating_sub(head.len() + tail.len());
    format!("{head}{}{tail}", "x".repeat(pad))
}

/// `hello` + `send` bytes of one envelope with a body of `body_bytes`; returns its id and the
/// envelope's wire size (its canonical text and newline, as delivered).
pub(crate) fn scale_send(
    from: &Agent,
    to: &str,
    kind: &str,
    correlation_id: Option<String>,
    body_bytes: usize,
    seq: usize,
    out: &mut Vec<u8>,
) -> Res<(String, usize)> {
    let id = uuid::Uuid::new_v4().to_string();
    let env = Envelope::new(
        id.clone(),
        from.name.clone(),
        to.to_owned(),
        now_ts(),
        kind.to_owned(),
        correlation_id,
        body_of(body_bytes, seq),
    )
    .map_err(|e| format!("envelope: {e}"))?;
    let wire = env.to_json().len() + 1;
    out.clear();
    out.extend_from_slice(&from.hello);
    out.extend_from_slice(ClientLine::Send(env).encode().as_bytes());
    Ok((id, wire))
}

/// Sends `n` envelopes to `to` on `threads` threads, connection per op; the mean wire size.
pub(crate) fn fill_by_sends(
    addr: SocketAddr,
    from: &Agent,
    to: &str,
    n: usize,
    body_bytes: usize,
    threads: usize,
) -> Res<usize> {
    let handles: Vec<_> = split(n, threads)
        .into_iter()
        .enumerate()
        .map(|(t, count)| {
            let (from, to) = (from.clone(), to.to_owned());
            std::thread::spawn(move || -> Res<usize> {
                let (mut out, mut buf, mut wire) = (Vec::new(), Vec::new(), 0);
                for i in 0..count {
                    let (id, w) =
                        scale_send(&from, &to, "task", None, body_bytes, t * n + i, &mut out)?;
                    send_once(addr, &out, &id, &mut buf)?;
                    wire += w;
                }
                Ok(wire)
            })
        })
        .collect();
    let total: usize = join_all(handles)?.into_iter().sum();
    Ok(total / n.max(1))
}
