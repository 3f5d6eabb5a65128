//! Phase 6: mail across two hubs linked by the relay (SPEC §15): cross-hub handoff latency and
//! throughput.

use crate::base::Res;
use crate::client::{await_bytes, expect_ok, join_all, open, read_line, split};
use crate::fixtures::{write_private, Fixture};
use crate::hub_process::HubProcess;
use crate::options::{Opts, StoreKind, DRAIN_THREADS};
use crate::phase_handoff::{handoff_between, HandoffResult};
use crate::phase_sends::send_run;
use crate::stats::Run;
use agent_hub_proto::wire::HubLine;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Barrier};

// ----- phase 6: mail across two linked hubs (SPEC §15) -----

pub(crate) struct ForwardResult {
    pub(crate) handoff: HandoffResult,
    /// Wall: from the first send on east until west's awaits have every envelope.
    pub(crate) throughput: Run,
}

/// The `[relay]` table of one side of the bench's pair; the key file sits next to the config.
pub(crate) fn relay_table(
    me: &str,
    listen: &str,
    peer: &str,
    address: Option<SocketAddr>,
) -> String {
    let address = address.map_or_else(String::new, |a| format!("address = \"{a}\"\n"));
    format!(
        "\n[relay]\npeer_id = \"{me}\"\nlisten = \"{listen}\"\nheartbeat_interval_ms = 30000\n\
         handshake_timeout_ms = 10000\nreconnect_backoff_ms = [100, 1000]\n\
         features = [\"unknown-ok\", \"mutual-auth\", \"frame-bin\", \"lz4\", \"hb-delta\", \"bus-forward\"]\n\
         status_path = \"relay-status-{me}.json\"\n\n[[relay.peers]]\nid = \"{peer}\"\n{address}\
         key_file = \"relay-{me}.key\"\nallow_claudectl = false\nforward = true\n"
    )
}

/// Starts west (a second fixture in its own folder) and east (the main fixture) linked by the
/// relay, both with store `kind`, then times cross-hub handoffs and a throughput run.
pub(crate) fn phase_forward(
    server: &Path,
    work: &Path,
    fx: &Fixture,
    opts: &Opts,
    kind: StoreKind,
) -> Res<ForwardResult> {
    let west_dir = work.join(format!("west-{}", kind.name()));
    std::fs::create_dir(&west_dir).map_err(|e| format!("{}: {e}", west_dir.display()))?;
    std::fs::set_permissions(&west_dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| e.to_string())?;
    let west = Fixture::write(&west_dir, opts)?;
    let key = format!(
        "{}{}\n",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    write_private(&west_dir.join("relay-west.key"), &key)?;
    let east_key = work.join("relay-east.key");
    if !east_key.exists() {
        write_private(&east_key, &key)?;
    } else {
        std::fs::write(&east_key, &key).map_err(|e| e.to_string())?;
    }
    let read = |p: &Path| std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()));
    let west_config = west_dir.join("config-relay.toml");
    let text = read(west.config(kind))? + &relay_table("west", "127.0.0.1:0", "east", None);
    write_private(&west_config, &text)?;
    let west_hub = HubProcess::start_with(server, &west_config, &west.stderr_path)?;
    let at = west_hub
        .relay_addr
        .ok_or("west printed no relay address before its ready line")?;
    let east_config = work.join(format!("config-{}-relay.toml", kind.name()));
    let text = read(fx.config(kind))? + &relay_table("east", "", "west", Some(at));
    write_private(&east_config, &text)?;
    if kind == StoreKind::Sqlite {
        fx.remove_db()?;
    }
    let mut east_hub = HubProcess::start_with(server, &east_config, &fx.stderr_path)?;
    let pair = [&east_hub, &west_hub];
    let result = (|| -> Res<ForwardResult> {
        // The first (warm-up) handoffs wait for the link to come up.
        let to = format!("{}@west", west.hand_rx.name);
        let handoff = handoff_between(
            &pair,
            &fx.hand_tx,
            &west.hand_rx,
            &to,
            opts.forward_handoffs,
            false,
        )?;
        let total = opts.forward_sends;
        let (addr, sink) = (west_hub.addr, west.sink.clone());
        let drain = move |start: Arc<Barrier>| -> Res<()> {
            let bytes: Arc<[u8]> = Arc::from(await_bytes(&sink, None, Some(60), false));
            let handles: Vec<_> = split(total, DRAIN_THREADS)
                .into_iter()
                .map(|n| {
                    let bytes = bytes.clone();
                    std::thread::spawn(move || -> Res<usize> {
                        let mut buf = Vec::with_capacity(1024);
                        for _ in 0..n {
                            let mut conn = open(addr, &bytes)?;
                            expect_ok(&mut conn, &mut buf)?;
                            match read_line(&mut conn, &mut buf)? {
                                HubLine::Envelope(_) => {}
                                other => return Err(format!("west drain: got {other:?}")),
                            }
                        }
                        Ok(n)
                    })
                })
                .collect();
            start.wait();
            let got: usize = join_all(handles)?.into_iter().sum();
            if got != total {
                return Err(format!("west took {got} envelopes, expected {total}"));
            }
            Ok(())
        };
        let to = format!("{}@west", west.sink.name);
        let throughput = send_run(&pair, &fx.sender, &to, 4, total, Some(Box::new(drain)))?;
        Ok(ForwardResult {
            handoff,
            throughput,
        })
    })();
    let stopped = east_hub.terminate();
    drop(west_hub);
    let result = result?;
    match stopped {
        Some(s) if s.success() => Ok(result),
        _ => Err(format!(
            "east did not stop cleanly: {}",
            east_hub.stderr_tail()
        )),
    }
}
