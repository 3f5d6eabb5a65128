//! Durability with the real binaries (SPEC §12, issue 3): the SQLite queue store under SIGKILL
//! during sends and during ack-mode deliveries, restarts on the same data directory, a full
//! store, the schema version and the one-hub-per-file lock, and the client's side of it
//! (`status --id`, the ack fallback against a 004 hub, the same-id resend).
//!
//! Owns: what survives a crash or a restart, and what a client can rely on across one.
//! Refuses: exact timings and the single-process ordering rules (the core's simulation tests
//! and `delivery` own those). Every wait is a poll of an observable condition with a deadline:
//! a counter the test threads bump, the audit or service log, or a process exit.

use crate::harness::*;
use agent_hub_cli::client::{self, Acked, AwaitOutcome, ClientError, Endpoint};
use agent_hub_proto::wire::{AwaitRequest, Envelope};
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The store cap for tests that do not test the cap.
const ROOMY: u64 = 256 * 1024 * 1024;
/// The bound on the crash tests' longer phases (thousands of sends, a drain).
const LONG_DEADLINE: Duration = Duration::from_secs(60);

fn sqlite_setup() -> Setup {
    Setup::new().with_sqlite_store(ROOMY)
}

/// Adds agents to the default roster, each with a token file; returns their tokens.
fn add_agents(setup: &Setup, names: &[String]) -> Vec<String> {
    let mut roster = String::from("[agents]\n");
    for (name, token) in AGENTS {
        roster.push_str(&format!("{name} = \"{token}\"\n"));
    }
    let mut tokens = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let token = format!("tok-{name}-SECRET-{i:04}");
        roster.push_str(&format!("{name} = \"{token}\"\n"));
        setup.write_token(name, &format!("{token}\n"), 0o600);
        tokens.push(token);
    }
    setup.write_roster(&roster, 0o600);
    tokens
}

fn envelope(id: &str, from: &str, to: &str, body: String) -> Envelope {
    Envelope::new(
        id.into(),
        from.into(),
        to.into(),
        TS.into(),
        "task".into(),
        None,
        body,
    )
    .unwrap()
}

fn poll_now() -> AwaitRequest {
    AwaitRequest {
        timeout_secs: Some(0),
        ..AwaitRequest::default()
    }
}

/// Polls `f` with the yield of `poll_until`, up to `limit` instead of `DEADLINE`.
fn poll_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The numbers in the service log's last "queue store …: N envelopes and M remembered ids
/// restored" line.
fn restored(hub: &Hub) -> (usize, usize) {
    let log = hub.service_log();
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("remembered ids restored"))
        .unwrap_or_else(|| panic!("no restore line in the service log:\n{log}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let at = |w: &str| {
        let i = words.iter().position(|x| *x == w).unwrap();
        words[i - 1].parse().unwrap()
    };
    (at("envelopes"), at("remembered"))
}

/// Acked awaits with timeout 0 until the queue is empty: the envelopes' texts, in order.
fn drain_acked(ep: &Endpoint) -> Vec<String> {
    let mut got = Vec::new();
    loop {
        let mut text = None;
        let outcome = client::await_acked(ep, poll_now(), |t| {
            text = Some(t.to_owned());
            Ok(())
        })
        .unwrap_or_else(|e| panic!("drain after {} envelopes: {e}", got.len()));
        match outcome {
            None => return got,
            Some(Acked::Confirmed) => got.push(text.expect("delivered")),
            Some(other) => panic!("ack not confirmed without a crash: {other:?}"),
        }
    }
}

fn field(text: &str, key: &str) -> Value {
    let v: Value = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {text}"));
    v[key].clone()
}

// ----- 1. SIGKILL in the middle of 10,000 sends -----

const SENDERS: usize = 8;
const SENDS_PER_SENDER: usize = 1250;
const KILL_AFTER_ACCEPTED: usize = 3000;

/// What one sender thread saw.
#[derive(Default)]
struct SenderLog {
    /// Ids whose `accepted` reached this sender, in sending order.
    accepted: Vec<String>,
    /// Sends whose first connection failed before `accepted` arrived (the crash).
    interrupted: usize,
}

/// Sends `count` envelopes one after another; a send cut off by the crash is resent with the
/// same id through the library's retry (`send_with_retry`) until the restarted hub answers.
fn sender(
    ep: Endpoint,
    to: &str,
    count: usize,
    accepted_total: &AtomicUsize,
    started: Instant,
) -> SenderLog {
    let mut log = SenderLog::default();
    for seq in 0..count {
        let id = uuid::Uuid::new_v4().to_string();
        let body = json!({"sender": ep.name, "seq": seq}).to_string();
        let env = envelope(&id, &ep.name, to, body);
        let got = match client::send(&ep, env.clone()) {
            Ok(got) => got,
            Err(ClientError::Connect(_) | ClientError::Io(_)) => {
                log.interrupted += 1;
                loop {
                    match client::send_with_retry(&ep, env.clone()) {
                        Ok(got) => break got,
                        // The retries (1.5 s of backoff) ran out before the hub came back.
                        Err(ClientError::Connect(_) | ClientError::Io(_))
                            if started.elapsed() < LONG_DEADLINE => {}
                        Err(e) => panic!("{} seq {seq}: resend failed: {e}", ep.name),
                    }
                }
            }
            Err(e) => panic!("{} seq {seq}: send refused: {e}", ep.name),
        };
        assert_eq!(got, id, "accepted answers the id sent");
        log.accepted.push(id);
        accepted_total.fetch_add(1, Ordering::Relaxed);
    }
    log
}

#[test]
fn sigkill_during_ten_thousand_sends_loses_and_duplicates_nothing() {
    let setup = sqlite_setup();
    let names: Vec<String> = (0..SENDERS).map(|i| format!("s{i}")).collect();
    let tokens = add_agents(&setup, &names);
    let mut hub = setup.start();
    let port = hub.port;
    let recipients = ["alpha", "beta", "gamma", "delta"];
    let accepted_total = AtomicUsize::new(0);
    let started = Instant::now();

    let (logs, at_kill, restart_took, restored_envelopes) = std::thread::scope(|s| {
        let threads: Vec<_> = names
            .iter()
            .zip(&tokens)
            .enumerate()
            .map(|(i, (name, token))| {
                let ep = Endpoint {
                    name: name.clone(),
                    token: token.clone(),
                    port,
                };
                let to = recipients[i % recipients.len()];
                let total = &accepted_total;
                s.spawn(move || sender(ep, to, SENDS_PER_SENDER, total, started))
            })
            .collect();
        poll_for("the senders to get 3,000 accepted", LONG_DEADLINE, || {
            (accepted_total.load(Ordering::Relaxed) >= KILL_AFTER_ACCEPTED).then_some(())
        });
        hub.kill();
        // Everything counted so far had its `accepted` before the kill, so it is on disk.
        let at_kill = accepted_total.load(Ordering::Relaxed);
        let t = Instant::now();
        hub.restart();
        let restart_took = t.elapsed();
        let (restored_envelopes, _) = restored(&hub);
        let logs: Vec<SenderLog> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        (logs, at_kill, restart_took, restored_envelopes)
    });
    let send_phase = started.elapsed();
    assert!(
        restored_envelopes >= at_kill,
        "{at_kill} envelopes were acknowledged before the kill but only {restored_envelopes} came back"
    );

    // Drain each recipient with one ack-mode reader, so the order read is the queue's order.
    let drain_start = Instant::now();
    let drained: Vec<Vec<String>> = std::thread::scope(|s| {
        let readers: Vec<_> = recipients
            .iter()
            .map(|r| {
                let ep = hub.endpoint(r);
                s.spawn(move || drain_acked(&ep))
            })
            .collect();
        readers.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let drain_took = drain_start.elapsed();

    let mut seen = HashSet::new();
    let mut per_sender: HashMap<String, Vec<(String, u64)>> = HashMap::new();
    for (recipient, texts) in recipients.iter().zip(&drained) {
        for text in texts {
            let v: Value = serde_json::from_str(text).unwrap();
            let id = v["id"].as_str().unwrap().to_owned();
            assert!(seen.insert(id.clone()), "{id} delivered twice");
            assert_eq!(v["to"], *recipient);
            let from = v["from"].as_str().unwrap().to_owned();
            assert_eq!(v["body"]["sender"], from.as_str(), "from is the sender");
            let seq = v["body"]["seq"].as_u64().unwrap();
            per_sender.entry(from).or_default().push((id, seq));
        }
    }
    let total: usize = logs.iter().map(|l| l.accepted.len()).sum();
    assert_eq!(total, SENDERS * SENDS_PER_SENDER, "every send was accepted");
    assert_eq!(
        seen.len(),
        total,
        "delivered exactly the accepted envelopes"
    );
    for (name, log) in names.iter().zip(&logs) {
        let got = per_sender.remove(name).unwrap_or_default();
        let ids: Vec<&String> = got.iter().map(|(id, _)| id).collect();
        let want: Vec<&String> = log.accepted.iter().collect();
        assert!(ids == want, "{name}: delivered out of acceptance order");
        let seqs: Vec<u64> = got.iter().map(|&(_, seq)| seq).collect();
        assert!(
            seqs == (0..SENDS_PER_SENDER as u64).collect::<Vec<_>>(),
            "{name}: sequence numbers out of order"
        );
    }
    for r in recipients {
        assert_eq!(
            client::await_envelope(&hub.endpoint(r), poll_now()).unwrap(),
            AwaitOutcome::Timeout
        );
    }
    let duplicates = hub.audit_events("duplicate").len();
    // A send audited just before the kill but not yet committed is audited again when its
    // resend is accepted: the audit log may hold a few more `accepted` records than envelopes.
    let audited = hub.audit_events("accepted").len();
    assert!(
        audited >= total,
        "{audited} accepted records for {total} envelopes"
    );
    let interrupted: usize = logs.iter().map(|l| l.interrupted).sum();
    assert!(
        duplicates <= interrupted,
        "{duplicates} resends answered as duplicates but only {interrupted} sends were resent"
    );
    eprintln!(
        "crash during sends: {total} sends from {SENDERS} senders; SIGKILL after {at_kill} accepted; \
         {restored_envelopes} envelopes restored; {interrupted} sends cut off and resent, \
         {duplicates} of them answered as duplicates; {audited} accepted records audited; \
         restart {restart_took:?}; \
         send phase {send_phase:?}; drain {drain_took:?}"
    );
}

/// What one sender saw before and during a clean stop.
#[derive(Default)]
struct StopLog {
    accepted: Vec<String>,
    /// Sends answered with an error line (e.g. "hub is shutting down").
    refused: Vec<String>,
    /// Sends whose connection ended without a reply line, or could not be made.
    cut: Vec<String>,
}

/// SIGTERM while senders are busy, with `sync = "full"`: replies wait for flushes and sends
/// staged while a flush runs wait for the next commit, so a stop must see every commit flushed
/// and answered before the process ends. Every `accepted` comes back after the restart, exactly
/// once, and no refused send appears.
#[test]
fn sigterm_during_sends_answers_what_it_accepted_and_keeps_it() {
    let setup = sqlite_setup();
    let names: Vec<String> = (0..SENDERS).map(|i| format!("t{i}")).collect();
    let tokens = add_agents(&setup, &names);
    let mut hub = setup.start();
    let port = hub.port;
    let accepted_total = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);

    let (logs, status) = std::thread::scope(|s| {
        let threads: Vec<_> = names
            .iter()
            .zip(&tokens)
            .map(|(name, token)| {
                let ep = Endpoint {
                    name: name.clone(),
                    token: token.clone(),
                    port,
                };
                let (total, stop) = (&accepted_total, &stop);
                s.spawn(move || {
                    let mut log = StopLog::default();
                    for seq in 0.. {
                        let id = uuid::Uuid::new_v4().to_string();
                        let body = json!({"sender": ep.name, "seq": seq}).to_string();
                        match client::send(&ep, envelope(&id, &ep.name, "alpha", body)) {
                            Ok(got) => {
                                assert_eq!(got, id);
                                log.accepted.push(id);
                                total.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(ClientError::Hub(_)) => log.refused.push(id),
                            Err(ClientError::Connect(_) | ClientError::Io(_)) => {
                                log.cut.push(id);
                                if stop.load(Ordering::Relaxed) {
                                    break;
                                }
                            }
                            Err(e) => panic!("{}: {e}", ep.name),
                        }
                    }
                    log
                })
            })
            .collect();
        poll_for("the senders to get 1,000 accepted", LONG_DEADLINE, || {
            (accepted_total.load(Ordering::Relaxed) >= 1000).then_some(())
        });
        stop.store(true, Ordering::Relaxed);
        let status = hub.terminate();
        let logs: Vec<StopLog> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        (logs, status)
    });
    assert!(status.success(), "a clean stop exits 0: {status:?}");
    hub.restart();
    let drained = hub.drain("alpha");
    let delivered: HashSet<&String> = drained.iter().collect();
    assert_eq!(delivered.len(), drained.len(), "nothing delivered twice");
    for log in &logs {
        for id in &log.accepted {
            assert!(delivered.contains(id), "accepted {id} was lost by the stop");
        }
        for id in &log.refused {
            assert!(
                !delivered.contains(id),
                "refused {id} was queued all the same"
            );
        }
    }
    let accepted: usize = logs.iter().map(|l| l.accepted.len()).sum();
    let cut: usize = logs.iter().map(|l| l.cut.len()).sum();
    let refused: usize = logs.iter().map(|l| l.refused.len()).sum();
    // A send cut off by the stop may or may not have been committed; either way at most once.
    assert!(drained.len() <= accepted + cut);
    eprintln!(
        "clean stop during sends: {accepted} accepted (all restored), {refused} refused, \
         {cut} cut off; {} restored",
        drained.len()
    );
}

// ----- 2. SIGKILL during ack-mode deliveries; a reader that never acks -----

const ACK_QUEUE: usize = 1000;
const ACK_READERS: usize = 4;

/// One envelope as an `agent-hub await` process printed it.
struct Printed {
    text: String,
    /// The CLI saw the hub's `acked` (no "ack not confirmed" warning).
    confirmed: bool,
    /// The await began after the restarted hub was up.
    after_restart: bool,
}

/// A reader loop: `agent-hub await --timeout 0` (ack mode, the default) again and again,
/// appending each printed envelope to `file`. Exit 1 means the hub is down: it tries again
/// (the yield between tries is `poll_until`'s). It stops at the first empty queue (exit 2)
/// once `restarted` is set.
fn reader_loop(
    cmd: impl Fn() -> Command,
    file: PathBuf,
    restarted: &AtomicBool,
    printed_total: &AtomicUsize,
) -> (Vec<Printed>, usize) {
    let mut out_file = std::fs::File::create(&file).unwrap();
    let mut printed = Vec::new();
    let mut refused = 0;
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < LONG_DEADLINE,
            "reader loop ran too long"
        );
        let after_restart = restarted.load(Ordering::SeqCst);
        let out = run(cmd(), None);
        match out.code {
            0 => {
                assert!(out.stdout.ends_with('\n') && out.stdout.matches('\n').count() == 1);
                out_file.write_all(out.stdout.as_bytes()).unwrap();
                let confirmed = !out.stderr.contains("ack not confirmed");
                if confirmed {
                    assert!(out.stderr.is_empty(), "{}", out.stderr);
                }
                printed.push(Printed {
                    text: out.stdout.trim_end().to_owned(),
                    confirmed,
                    after_restart,
                });
                printed_total.fetch_add(1, Ordering::SeqCst);
            }
            2 => {
                assert!(out.stdout.is_empty(), "{out:?}");
                if after_restart {
                    return (printed, refused);
                }
            }
            _ => {
                out.assert_code(1);
                assert!(out.stdout.is_empty(), "nothing printed on failure: {out:?}");
                refused += 1;
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
}

#[test]
fn sigkill_during_ack_mode_deliveries_loses_nothing_and_duplicates_only_unconfirmed() {
    let mut hub = sqlite_setup().start();
    let alpha = hub.endpoint("alpha");
    let mut sent = Vec::new();
    for n in 0..ACK_QUEUE {
        let id = format!("ackq-{n:04}");
        client::send(
            &alpha,
            envelope(&id, "alpha", "beta", json!({"n": n}).to_string()),
        )
        .unwrap();
        sent.push(id);
    }
    // A reader that has the first envelope and has not acked it when the hub dies: the
    // deterministic case of "printed, then the ack was lost".
    let mut holder = hub.park("beta", r#"{"await":{"ack":true}}"#);
    let line = holder.line();
    let held = line
        .strip_prefix(r#"{"envelope":"#)
        .and_then(|l| l.strip_suffix('}'))
        .unwrap_or_else(|| panic!("expected an envelope line: {line}"))
        .to_owned();
    assert_eq!(field(&held, "id"), sent[0].as_str());
    let port = hub.port.to_string();
    let token_file = hub.token_file("beta");
    let restarted = AtomicBool::new(false);
    let printed_total = AtomicUsize::new(0);
    let started = Instant::now();
    let files: Vec<PathBuf> = (0..ACK_READERS)
        .map(|i| hub.setup.path(&format!("reader-{i}.jsonl")))
        .collect();

    let (results, at_kill) = std::thread::scope(|s| {
        let threads: Vec<_> = files
            .iter()
            .map(|file| {
                let (port, token_file) = (port.clone(), token_file.clone());
                let cmd = move || {
                    let mut c = Command::new(CLIENT);
                    c.args(["await", "--as", "beta", "--port", &port, "--timeout", "0"])
                        .arg("--token-file")
                        .arg(&token_file);
                    c
                };
                let (restarted, total) = (&restarted, &printed_total);
                s.spawn(move || reader_loop(cmd, file.clone(), restarted, total))
            })
            .collect();
        poll_for("a third of the queue to be printed", LONG_DEADLINE, || {
            (printed_total.load(Ordering::SeqCst) >= ACK_QUEUE / 3).then_some(())
        });
        hub.kill();
        let at_kill = printed_total.load(Ordering::SeqCst);
        holder.expect_eof();
        hub.restart();
        restarted.store(true, Ordering::SeqCst);
        let results: Vec<(Vec<Printed>, usize)> =
            threads.into_iter().map(|t| t.join().unwrap()).collect();
        (results, at_kill)
    });
    let took = started.elapsed();

    // Each reader's file holds exactly what it printed.
    for (file, (printed, _)) in files.iter().zip(&results) {
        let text = std::fs::read_to_string(file).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let want: Vec<&str> = printed.iter().map(|p| p.text.as_str()).collect();
        assert_eq!(lines, want);
    }
    let held = Printed {
        text: held,
        confirmed: false,
        after_restart: false,
    };
    let mut by_id: HashMap<String, Vec<&Printed>> = HashMap::new();
    by_id.entry(sent[0].clone()).or_default().push(&held);
    for (printed, _) in &results {
        for p in printed {
            let id = field(&p.text, "id").as_str().unwrap().to_owned();
            by_id.entry(id).or_default().push(p);
        }
    }
    let mut duplicates = 0;
    let mut unconfirmed = 0;
    for id in &sent {
        let prints = by_id
            .remove(id)
            .unwrap_or_else(|| panic!("{id} was never printed"));
        let confirmed = prints.iter().filter(|p| p.confirmed).count();
        unconfirmed += prints.len() - confirmed;
        // A confirmed ack is durable: nothing after it. So a duplicate needs a lost ack, and
        // one crash loses at most one ack per envelope.
        assert!(confirmed <= 1, "{id}: two confirmed acks");
        assert!(prints.len() <= 2, "{id}: printed {} times", prints.len());
        for p in &prints {
            assert_eq!(p.text, prints[0].text, "a duplicate is the same envelope");
            assert!(
                p.confirmed || !p.after_restart,
                "{id}: an ack was lost with no crash"
            );
        }
        duplicates += prints.len() - 1;
    }
    assert!(
        by_id.is_empty(),
        "printed but never sent: {:?}",
        by_id.keys()
    );
    assert!(
        duplicates >= 1,
        "the held envelope came back after the restart"
    );
    let out = hub.cli("await", "beta", &["--timeout", "0"]);
    out.assert_code(2);
    for id in &sent {
        assert_eq!(client::status(&alpha, id).unwrap().state, "acked", "{id}");
    }
    let refused: usize = results.iter().map(|(_, r)| r).sum();
    eprintln!(
        "crash during ack-mode deliveries: {ACK_QUEUE} envelopes, {ACK_READERS} reader loops; \
         SIGKILL after {at_kill} printed; {unconfirmed} acks unconfirmed, {duplicates} printed twice \
         (same id); {refused} awaits refused while the hub was down; {took:?}"
    );
}

#[test]
fn an_unacked_delivery_comes_back_with_its_attempts_even_across_a_crash() {
    let mut hub = sqlite_setup().start();
    let alpha = hub.endpoint("alpha");
    let x = hub.send("alpha", "beta", "task", None, r#"{"n":"x"}"#);
    let mut first = hub.park("beta", r#"{"await":{"ack":true}}"#);
    assert_eq!(first.envelope()["id"], x.as_str());
    // The next reader, the CLI in its default ack mode, parks behind it.
    let mut cli = spawn(hub.cli_command("await", "beta", &[]));
    hub.wait_audit("the CLI await to authenticate", |a| {
        a.iter()
            .filter(|v| v["event"] == "authenticated" && v["name"] == "beta")
            .count()
            >= 2
    });
    drop(first); // read, never acked
    let status = poll_until("the CLI await to exit", || cli.try_wait().unwrap());
    assert_eq!(status.code(), Some(0));
    let printed = read_all(cli.stdout.take().unwrap());
    assert_eq!(field(&printed, "id"), x.as_str(), "the next reader got it");
    let audit = hub.wait_audit("the ack", |a| a.iter().any(|v| v["event"] == "acked"));
    let requeued: Vec<&Value> = audit.iter().filter(|v| v["event"] == "requeued").collect();
    assert_eq!(requeued.len(), 1, "{requeued:?}");
    assert_eq!(requeued[0]["id"], x.as_str());
    assert_eq!(requeued[0]["attempts"], 1);
    let acked = audit.iter().find(|v| v["event"] == "acked").unwrap();
    assert_eq!(
        (acked["id"].as_str(), acked["attempts"].as_u64()),
        (Some(x.as_str()), Some(1))
    );

    // The attempt count is durable: a crash right after the requeue keeps it.
    let y = hub.send("alpha", "beta", "task", None, r#"{"n":"y"}"#);
    let mut reader = hub.park("beta", r#"{"await":{"ack":true}}"#);
    assert_eq!(reader.envelope()["id"], y.as_str());
    drop(reader);
    hub.wait_audit("the requeue", |a| {
        a.iter()
            .any(|v| v["event"] == "requeued" && v["id"] == y.as_str())
    });
    // A status round trip: its reply leaves after the requeue's commit, in a later iteration.
    assert_eq!(client::status(&alpha, &y).unwrap().attempts, Some(1));
    hub.kill();
    hub.restart();
    let st = client::status(&alpha, &y).unwrap();
    assert_eq!(
        (st.state.as_str(), st.position, st.attempts),
        ("queued", Some(1), Some(1))
    );
    let out = hub.cli("await", "beta", &["--timeout", "0"]);
    out.assert_code(0);
    assert_eq!(field(&out.stdout, "id"), y.as_str());
    let audit = hub.wait_audit("the second ack", |a| {
        a.iter()
            .any(|v| v["event"] == "acked" && v["id"] == y.as_str())
    });
    let acked = audit
        .iter()
        .find(|v| v["event"] == "acked" && v["id"] == y.as_str())
        .unwrap();
    assert_eq!(acked["attempts"], 1);
    hub.cli("await", "beta", &["--timeout", "0"]).assert_code(2);
}

// ----- 3. Restarts -----

#[test]
fn a_memory_store_loses_its_queues_on_restart_as_documented() {
    let mut hub = Hub::start();
    let id = hub.cli_send("alpha", "beta", "task", "{}");
    hub.cli_send("alpha", "beta", "task", "{}");
    assert!(hub.terminate().success());
    hub.restart();
    hub.cli("await", "beta", &["--timeout", "0"]).assert_code(2);
    let out = hub.cli("status", "alpha", &["--id", &id]);
    out.assert_code(0);
    assert_eq!(
        serde_json::from_str::<Value>(out.stdout.trim_end()).unwrap(),
        json!({"id": id, "state": "unknown"})
    );
}

#[test]
fn a_sqlite_store_keeps_queues_in_order_status_and_ids_across_restarts() {
    let mut hub = sqlite_setup().start();
    let ids: Vec<String> = (0..6)
        .map(|n| hub.send("alpha", "beta", "task", None, &format!("{{\"n\":{n}}}")))
        .collect();
    // The first is acked (CLI default), the second delivered plain (--no-ack).
    let out = hub.cli("await", "beta", &["--timeout", "0"]);
    out.assert_code(0);
    assert_eq!(field(&out.stdout, "id"), ids[0].as_str());
    let out = hub.cli("await", "beta", &["--timeout", "0", "--no-ack"]);
    out.assert_code(0);
    assert_eq!(field(&out.stdout, "id"), ids[1].as_str());
    let status = |hub: &Hub, who: &str, id: &str| -> Value {
        let out = hub.cli("status", who, &["--id", id]);
        out.assert_code(0);
        serde_json::from_str(out.stdout.trim_end()).unwrap()
    };
    let before: Vec<Value> = ids.iter().map(|id| status(&hub, "alpha", id)).collect();
    assert_eq!(before[0]["state"], "acked");
    assert_eq!(before[1]["state"], "delivered");
    assert_eq!(
        (&before[3]["state"], &before[3]["position"]),
        (&json!("queued"), &json!(2))
    );

    // A clean stop, then a crash: both keep the same picture.
    for stop in ["SIGTERM", "SIGKILL"] {
        if stop == "SIGTERM" {
            assert!(hub.terminate().success());
        } else {
            // Nothing is in flight: every reply above left after its commit.
            hub.kill();
        }
        hub.restart();
        assert_eq!(
            restored(&hub),
            (4, 6),
            "envelopes, remembered ids after {stop}"
        );
        for (id, want) in ids.iter().zip(&before) {
            for who in ["alpha", "beta"] {
                let mut got = status(&hub, who, id);
                let mut want = want.clone();
                if want["state"] == "queued" {
                    // `Hub::restore` stamps a queued envelope's `at` with the restore time.
                    assert!(got["at"].is_string(), "{got}");
                    got["at"] = Value::Null;
                    want["at"] = Value::Null;
                }
                assert_eq!(got, want, "status of {id} for {who} after {stop}");
            }
        }
    }

    // A resend with the same id after the restarts is a duplicate, queued or not.
    for id in [&ids[0], &ids[1], &ids[4]] {
        let n = ids.iter().position(|i| i == id).unwrap();
        let mut r = hub.login("alpha");
        r.write(&send_line(
            id,
            "beta",
            "task",
            None,
            &format!("{{\"n\":{n}}}"),
        ));
        assert_eq!(r.json(), json!({"accepted": {"id": id}}));
    }
    let mut r = hub.login("alpha");
    r.write(&send_line(
        &ids[2],
        "beta",
        "task",
        None,
        r#"{"n":"changed"}"#,
    ));
    assert!(r.error().contains("already accepted"));
    hub.wait_audit("three duplicates", |a| {
        a.iter().filter(|v| v["event"] == "duplicate").count() == 3
    });

    // FIFO as accepted, each once.
    assert_eq!(hub.drain("beta"), ids[2..].to_vec());
}

// ----- 4. A full store -----

const STORE_MIN: u64 = 1024 * 1024;

fn big_body(tag: &str) -> String {
    json!({"tag": tag, "pad": "x".repeat(30_000)}).to_string()
}

/// Sends 30 KB envelopes until the 1 MiB store refuses one; returns the accepted ids, the
/// refused id and the refusal's message.
fn fill(alpha: &Endpoint) -> (Vec<String>, String, String) {
    let mut accepted = Vec::new();
    for n in 0..200 {
        let id = format!("fill-{n:03}");
        match client::send(alpha, envelope(&id, "alpha", "beta", big_body(&id))) {
            Ok(got) => accepted.push(got),
            Err(ClientError::Hub(msg)) => return (accepted, id, msg),
            Err(e) => panic!("{e}"),
        }
    }
    panic!("a 1 MiB store took 200 envelopes of 30 KB");
}

#[test]
fn a_full_store_refuses_sends_serves_awaits_and_recovers() {
    let hub = Setup::new().with_sqlite_store(STORE_MIN).start();
    let alpha = hub.endpoint("alpha");
    let beta = hub.endpoint("beta");
    let (mut accepted, refused_id, msg) = fill(&alpha);
    assert!(
        msg.starts_with("envelope not accepted: the queue store could not be written ("),
        "{msg}"
    );
    assert!(accepted.len() >= 10, "only {} fit", accepted.len());
    // The refusal is final and clean: nothing of it is remembered or queued.
    assert_eq!(
        client::status(&alpha, &refused_id).unwrap().state,
        "unknown"
    );
    let out = hub.cli_stdin(
        "send",
        "alpha",
        &["--to", "beta", "--kind", "task", "--body", "-"],
        Some(big_body("cli").as_bytes()),
    );
    out.assert_code(1);
    assert!(
        out.stderr.starts_with(
            "agent-hub: envelope not accepted: the queue store could not be written ("
        ),
        "{}",
        out.stderr
    );
    assert!(out.stdout.is_empty());
    hub.wait_service_log("the commit failure", |s| {
        s.contains("commit failed: the queue store could not be written")
    });

    // Awaits are served while sends are refused; each ack frees room.
    let mut delivered = Vec::new();
    let out = hub.cli("await", "beta", &["--timeout", "0"]);
    out.assert_code(0);
    assert!(out.stderr.is_empty(), "{}", out.stderr);
    delivered.push(field(&out.stdout, "id").as_str().unwrap().to_owned());
    let mut recovered = None;
    for n in 0..10 {
        let id = format!("again-{n}");
        match client::send(&alpha, envelope(&id, "alpha", "beta", big_body(&id))) {
            Ok(got) => {
                recovered = Some(got);
                break;
            }
            Err(ClientError::Hub(m)) if m.contains("queue store") => {
                assert_eq!(client::status(&alpha, &id).unwrap().state, "unknown");
                let mut text = None;
                let acked = client::await_acked(&beta, poll_now(), |t| {
                    text = Some(t.to_owned());
                    Ok(())
                })
                .unwrap();
                assert_eq!(acked, Some(Acked::Confirmed));
                delivered.push(field(&text.unwrap(), "id").as_str().unwrap().to_owned());
            }
            Err(e) => panic!("{e}"),
        }
    }
    let recovered = recovered.expect("sends are accepted again after deliveries freed room");
    let freed_by = delivered.len();
    accepted.push(recovered);
    hub.wait_service_log("the recovery", |s| s.contains("commits succeed again"));
    let drained = drain_acked(&beta);
    delivered.extend(
        drained
            .iter()
            .map(|t| field(t, "id").as_str().unwrap().to_owned()),
    );
    assert_eq!(
        delivered, accepted,
        "every accepted envelope, once, in order"
    );
    eprintln!(
        "full store: {} envelopes of 30 KB fit in 1 MiB; {freed_by} deliveries freed room for the next",
        accepted.len() - 1
    );
}

// ----- 5. Schema version and the store lock -----

#[test]
fn a_newer_schema_version_is_fatal_at_startup() {
    let mut hub = sqlite_setup().start();
    hub.send("alpha", "beta", "task", None, "{}");
    assert!(hub.terminate().success());
    let db = hub.setup.path("queue.db");
    let c = rusqlite::Connection::open(&db).unwrap();
    let changed = c
        .execute(
            "UPDATE meta SET value = '99' WHERE key = 'schema_version'",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(c);
    let out = hub.setup.run_expecting_exit();
    out.assert_code(1);
    assert!(
        out.stderr
            .starts_with("agent-hub-server: startup failed at store: "),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("newer than this binary"),
        "{}",
        out.stderr
    );
    assert!(!out.stdout.contains("hub ready"));
}

#[test]
fn a_second_hub_on_the_same_store_fails_at_startup() {
    let hub = sqlite_setup().start();
    let db = hub.setup.path("queue.db");
    let second = Setup::new().with_sqlite_store_at(db.to_str().unwrap(), ROOMY);
    let out = second.run_expecting_exit();
    out.assert_code(1);
    assert!(
        out.stderr
            .starts_with("agent-hub-server: startup failed at store: "),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("another agent-hub-server"),
        "{}",
        out.stderr
    );
    // The first is unharmed.
    let id = hub.cli_send("alpha", "beta", "task", "{}");
    assert_eq!(hub.drain("beta"), vec![id]);
}

// ----- 6. The client: status, the ack fallback, the same-id resend -----

#[test]
fn status_answers_sender_and_recipient_only() {
    let hub = sqlite_setup().start();
    let id = hub.cli_send("alpha", "beta", "task", "{}");
    let status = |who: &str| -> Value {
        let out = hub.cli("status", who, &["--id", &id]);
        out.assert_code(0);
        assert!(out.stderr.is_empty(), "{}", out.stderr);
        serde_json::from_str(out.stdout.trim_end()).unwrap()
    };
    for who in ["alpha", "beta"] {
        let st = status(who);
        assert_eq!(
            (
                &st["id"],
                &st["state"],
                &st["from"],
                &st["to"],
                &st["position"]
            ),
            (
                &json!(id),
                &json!("queued"),
                &json!("alpha"),
                &json!("beta"),
                &json!(1)
            ),
            "{who}: {st}"
        );
        assert!(st["at"].is_string(), "{st}");
    }
    assert_eq!(status("gamma"), json!({"id": id, "state": "unknown"}));
    hub.cli("await", "beta", &["--timeout", "0"]).assert_code(0);
    assert_eq!(status("alpha")["state"], "acked");
    assert_eq!(status("beta")["state"], "acked");
    assert_eq!(status("gamma"), json!({"id": id, "state": "unknown"}));
    assert_eq!(
        status_of(&hub, "alpha", "no-such-id"),
        json!({"id": "no-such-id", "state": "unknown"})
    );
}

fn status_of(hub: &Hub, who: &str, id: &str) -> Value {
    let out = hub.cli("status", who, &["--id", id]);
    out.assert_code(0);
    serde_json::from_str(out.stdout.trim_end()).unwrap()
}

/// A fake hub on a free port: serves `conns` connections in order with `serve`, each given the
/// lines read so far and the stream; returns every connection's lines.
fn fake_hub(
    conns: usize,
    serve: impl Fn(usize, &mut BufReader<TcpStream>, &mut Vec<String>) + Send + 'static,
) -> (u16, std::thread::JoinHandle<Vec<Vec<String>>>) {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = std::thread::spawn(move || {
        let mut all = Vec::new();
        for n in 0..conns {
            let (stream, _) = listener.accept().unwrap();
            stream.set_read_timeout(Some(DEADLINE)).unwrap();
            let mut reader = BufReader::new(stream);
            let mut lines = Vec::new();
            serve(n, &mut reader, &mut lines);
            all.push(lines);
        }
        all
    });
    (port, handle)
}

fn read_lines(reader: &mut BufReader<TcpStream>, lines: &mut Vec<String>, n: usize) {
    for _ in 0..n {
        let mut l = String::new();
        assert!(reader.read_line(&mut l).unwrap() > 0, "client closed early");
        lines.push(l.trim_end().to_owned());
    }
}

/// Reads to EOF so the close is clean (no reset with the client's bytes unread).
fn until_eof(reader: &mut BufReader<TcpStream>) {
    let mut rest = Vec::new();
    let _ = reader.read_to_end(&mut rest);
}

fn client_cmd(setup: &Setup, verb: &str, name: &str, port: u16, rest: &[&str]) -> Command {
    let mut cmd = Command::new(CLIENT);
    cmd.args([verb, "--as", name, "--port", &port.to_string()])
        .arg("--token-file")
        .arg(setup.path(&format!("tokens/{name}.token")))
        .args(rest);
    cmd
}

#[test]
fn the_cli_await_falls_back_to_a_plain_await_on_a_004_hub() {
    let env = json!({"id": "e-004", "from": "alpha", "to": "beta", "ts": TS, "kind": "task",
                     "correlationId": null, "body": {"n": 4}})
    .to_string();
    let line = format!("{{\"envelope\":{env}}}\n");
    let (port, fake) = fake_hub(2, move |n, reader, lines| {
        read_lines(reader, lines, 2);
        let mut w = reader.get_ref();
        if n == 0 {
            // What a 004 hub says to a key it does not know; it consumed nothing.
            let refusal =
                error_line("unknown field `ack`, expected one of `replyTo`, `kind`, `timeoutSecs`");
            w.write_all(format!("{OK}\n{refusal}\n").as_bytes())
                .unwrap();
        } else {
            w.write_all(format!("{OK}\n{line}").as_bytes()).unwrap();
            until_eof(reader);
        }
    });
    let setup = Setup::new();
    let out = run(client_cmd(&setup, "await", "beta", port, &[]), None);
    out.assert_code(0);
    assert_eq!(out.stdout, format!("{env}\n"));
    assert!(out.stderr.is_empty(), "{}", out.stderr);
    let conns = fake.join().unwrap();
    let awaits: Vec<Value> = conns
        .iter()
        .map(|c| serde_json::from_str(&c[1]).unwrap())
        .collect();
    let plain = json!({"await": {"replyTo": null, "kind": null, "timeoutSecs": null}});
    let mut acked = plain.clone();
    acked["await"]["ack"] = json!(true);
    acked["await"]["reader"] = json!("cli-await");
    assert_eq!(awaits[0], acked);
    assert_eq!(
        awaits[1], plain,
        "the fallback is the 004 line, without `ack`"
    );
    for c in &conns {
        assert_eq!(
            serde_json::from_str::<Value>(&c[0]).unwrap()["hello"]["name"],
            "beta"
        );
    }
}

/// A hub from before receipts (issue 12) knows `ack` but refuses the `reader` key: the CLI
/// asks again without it and keeps ack mode (SPEC §12.4 "Readers").
#[test]
fn the_cli_await_drops_its_reader_for_a_hub_before_receipts() {
    let env = json!({"id": "e-r", "from": "alpha", "to": "beta", "ts": TS, "kind": "task",
                     "correlationId": null, "body": {}})
    .to_string();
    let line = format!("{{\"envelope\":{env}}}\n");
    let (port, fake) = fake_hub(2, move |n, reader, lines| {
        read_lines(reader, lines, 2);
        let mut w = reader.get_ref();
        if n == 0 {
            let refusal = error_line(
                "malformed line: unknown field in `await`, expected one of `replyTo`, `kind`, `timeoutSecs`, `ack`",
            );
            w.write_all(format!("{OK}\n{refusal}\n").as_bytes())
                .unwrap();
        } else {
            w.write_all(format!("{OK}\n{line}").as_bytes()).unwrap();
            read_lines(reader, lines, 1);
            let mut w = reader.get_ref();
            w.write_all(format!("{}\n", json!({"acked": {"id": "e-r"}})).as_bytes())
                .unwrap();
            until_eof(reader);
        }
    });
    let setup = Setup::new();
    let out = run(client_cmd(&setup, "await", "beta", port, &[]), None);
    out.assert_code(0);
    assert_eq!(out.stdout, format!("{env}\n"));
    assert!(
        out.stderr.is_empty(),
        "no unconfirmed-ack warning: {}",
        out.stderr
    );
    let conns = fake.join().unwrap();
    let first: Value = serde_json::from_str(&conns[0][1]).unwrap();
    assert_eq!(first["await"]["reader"], "cli-await");
    let second: Value = serde_json::from_str(&conns[1][1]).unwrap();
    assert_eq!(
        second,
        json!({"await": {"replyTo": null, "kind": null, "timeoutSecs": null, "ack": true}}),
        "ack mode kept, reader dropped"
    );
    assert_eq!(conns[1][2], json!({"ack": {"id": "e-r"}}).to_string());
}

#[test]
fn the_cli_send_resends_the_same_id_after_a_dropped_connection() {
    let (port, fake) = fake_hub(2, |n, reader, lines| {
        read_lines(reader, lines, 2);
        if n == 1 {
            let v: Value = serde_json::from_str(&lines[1]).unwrap();
            let id = v["send"]["id"].as_str().unwrap().to_owned();
            let mut w = reader.get_ref();
            w.write_all(format!("{OK}\n{}\n", json!({"accepted": {"id": id}})).as_bytes())
                .unwrap();
            until_eof(reader);
        }
        // The first connection is dropped before any reply, as by a crashing hub.
    });
    let setup = Setup::new();
    let out = run(
        client_cmd(
            &setup,
            "send",
            "alpha",
            port,
            &["--to", "beta", "--kind", "task", "--body", r#"{"n":1}"#],
        ),
        None,
    );
    out.assert_code(0);
    assert!(out.stderr.is_empty(), "{}", out.stderr);
    let conns = fake.join().unwrap();
    let sends: Vec<Value> = conns
        .iter()
        .map(|c| serde_json::from_str(&c[1]).unwrap())
        .collect();
    assert_eq!(
        sends[0], sends[1],
        "the resend is the same envelope, same id"
    );
    assert_eq!(
        out.stdout,
        format!("{}\n", sends[0]["send"]["id"].as_str().unwrap())
    );
}

/// The same resend against the real hub: the first attempt's `accepted` never arrives (the
/// connection is cut after the send is committed), the resend is answered without a copy.
#[test]
fn a_resend_whose_first_attempt_was_committed_is_a_duplicate_after_a_crash() {
    let mut hub = sqlite_setup().start();
    let mut r = hub.login("alpha");
    r.write(&send_line("once", "beta", "task", None, "{}"));
    assert_eq!(r.json(), json!({"accepted": {"id": "once"}}));
    hub.kill();
    hub.restart();
    let alpha = hub.endpoint("alpha");
    let env = envelope("once", "alpha", "beta", "{}".into());
    assert_eq!(client::send_with_retry(&alpha, env).unwrap(), "once");
    hub.wait_audit("the duplicate", |a| {
        a.iter()
            .any(|v| v["event"] == "duplicate" && v["id"] == "once")
    });
    assert_eq!(hub.drain("beta"), vec!["once".to_owned()]);
}

/// A crash in the middle of an audit append leaves a partial last line. The next run cuts it
/// back, so its own first record is not glued to the fragment and the log stays JSON lines.
#[test]
fn an_audit_log_torn_by_a_crash_is_cut_back_at_startup() {
    let setup = sqlite_setup();
    let whole = "{\"v\":2,\"ts\":\"2026-01-01T00:00:00Z\",\"event\":\"connected\",\"conn\":2}\n";
    let torn = "{\"v\":2,\"ts\":\"2026-01-01T00:00:0";
    write_file(&setup.path("audit.jsonl"), &format!("{whole}{torn}"), 0o600);
    let hub = setup.start();
    let id = hub.send("alpha", "beta", "task", None, "{}");
    let audit = hub.wait_audit("the accepted record", |a| {
        a.iter().any(|v| v["event"] == "accepted")
    });
    assert_eq!(audit[0], serde_json::from_str::<Value>(whole).unwrap());
    assert_eq!(
        audit[1]["event"], "connected",
        "the fragment is gone: {:?}",
        audit[1]
    );
    assert!(audit.iter().any(|v| v["envelope"]["id"] == id.as_str()));
    let log = hub.service_log();
    assert!(
        log.contains(&format!(
            "audit log ended in a partial record ({} bytes",
            torn.len()
        )),
        "{log}"
    );
}

/// Acks must be recorded while a full store refuses sends, or a reader can never free the
/// room the senders wait for. Regression: a refused send used to fail the whole commit of its
/// loop iteration, the acks and the plain deliveries' removals in it included, so under steady
/// send pressure almost no ack was recorded (4 of 33 in 10 s) and the store never drained. The
/// loop now retries a failed commit without its sends.
#[test]
fn acks_are_recorded_while_sends_to_a_full_store_keep_failing() {
    let hub = Setup::new().with_sqlite_store(STORE_MIN).start();
    let alpha = hub.endpoint("alpha");
    let beta = hub.endpoint("beta");
    let (accepted, _, _) = fill(&alpha);
    let stop = AtomicBool::new(false);
    let started = Instant::now();
    let (confirmed, unconfirmed) = std::thread::scope(|s| {
        for t in 0..3 {
            let (alpha, stop) = (alpha.clone(), &stop);
            s.spawn(move || {
                for n in 0.. {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let id = format!("pressure-{t}-{n}");
                    match client::send(&alpha, envelope(&id, "alpha", "gamma", big_body(&id))) {
                        Ok(_) | Err(ClientError::Hub(_)) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            });
        }
        let (mut confirmed, mut unconfirmed) = (0, 0);
        while confirmed < accepted.len() && started.elapsed() < DEADLINE {
            match client::await_acked(&beta, poll_now(), |_| Ok(())).unwrap() {
                Some(Acked::Confirmed) => confirmed += 1,
                Some(_) => unconfirmed += 1,
                None => break,
            }
        }
        stop.store(true, Ordering::SeqCst);
        (confirmed, unconfirmed)
    });
    assert_eq!(
        confirmed,
        accepted.len(),
        "{confirmed} of {} acks recorded in {:?} ({unconfirmed} refused)",
        accepted.len(),
        started.elapsed()
    );
}
