//! Deterministic simulation tests of the sans-IO `Hub` (SPEC §4–§5, wire-compat.md).
//!
//! Owns the `Sim` harness: a hub on a virtual clock, driven the way the IO loop drives it
//! (lines in, the commit point, each `Output::Commit` executed against a fake store and audit
//! log that can be told to fail and reported back, delivery outcomes reported back), with
//! every output decoded through the client's own `HubLine::decode`. Refuses sockets, threads,
//! sleeps and the real clock: time moves only through `Sim::advance`.
//!
//! The tests are in one file per SPEC section: `hello_and_lines` (§2, §4), `send` (§3, §5.1),
//! `await_` (§5.2), `delivery_and_loss` (§5.3–§5.5), `commit_failure` and `commit` (§8,
//! §12.1), `shutdown` (§4.6), `ack` (§12.2), `idempotence_status` (§12.3, §12.4), `restore`
//! (§12.1), `flush` (§12.1 `sync = "full"`), `who` and `liveness` (§14), `forward` (§15), `pipelining`
//! (§4.3), `linger` (§4.3, §4.4), `redelivery`, `ids`, `receipts` (§12.4 readers and waits).

use super::*;
use crate::hub::durable::Loaded;
use crate::hub::durable::StoreFailure;
use crate::wire::{Envelope, EnvelopeStatus, HubLine};
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

const ROSTER: &str = r#"
[agents]
mneme = "tok-mneme"
datastore = "tok-datastore"
scribe = "tok-scribe"
"#;

/// The seed of every simulation's id source (bounce ids): a run is reproducible from it.
const SEED: u64 = 0x5eed;

const HELLO_MS: u64 = 1_000;
const VERB_MS: u64 = 2_000;

fn token(name: &str) -> String {
    format!("tok-{name}")
}

fn hello_text(name: &str, token: &str) -> String {
    json!({"hello": {"name": name, "token": token}}).to_string()
}

/// A send line. `from` is always forged: the hub must overwrite it whatever it says.
fn send_text(id: &str, to: &str, kind: &str, corr: Option<&str>, body: &str) -> String {
    format!(
        r#"{{"send":{{"id":{},"from":"forged","to":{},"ts":"2026-07-21T06:40:51Z","kind":{},"correlationId":{},"body":{body}}}}}"#,
        json!(id),
        json!(to),
        json!(kind),
        json!(corr),
    )
}

/// The `accepted` line for `id`, without a warning (none was asked for: SPEC §5.1).
fn accepted(id: impl Into<String>) -> HubLine {
    HubLine::Accepted {
        id: id.into(),
        warning: None,
    }
}

fn await_text(reply_to: Option<&str>, kind: Option<&str>, timeout_secs: Option<u64>) -> String {
    json!({"await": {"replyTo": reply_to, "kind": kind, "timeoutSecs": timeout_secs}}).to_string()
}

/// What one connection received during one drain.
#[derive(Debug, Default)]
struct ConnOut {
    /// Every line written, decoded; a delivery appears here as `HubLine::Envelope`.
    lines: Vec<HubLine>,
    /// The delivered envelope's raw text, exactly as it went on the wire.
    delivered: Option<String>,
    closed: bool,
}

/// Everything the hub emitted since the previous drain.
#[derive(Debug, Default)]
struct Drained {
    conns: BTreeMap<ConnId, ConnOut>,
    /// Deliveries in emission order.
    deliveries: Vec<(ConnId, Value)>,
    /// Audit events, with the staged `Accepted` records placed where the IO loop writes them.
    audit: Vec<AuditEvent>,
    logs: Vec<String>,
    /// Store operations of the batches written (only from a hub built `with_durable(true)`).
    store: Vec<crate::hub::durable::StoreOp>,
    /// `Output::Forward`s: (peer, seq, envelope text).
    forwards: Vec<(String, u64, String)>,
    /// `Output::ForwardAck`s: (peer, ack_id, error).
    forward_acks: Vec<(String, String, Option<String>)>,
    /// Delegated tasks' outputs (`hub::tasks`): starts, cancels, orphans to kill.
    task_starts: Vec<crate::tasks::StartSpec>,
    task_cancels: Vec<String>,
    /// Follow-up turns handed to runners (task, turn, interrupt) and kept sessions closed
    /// (issue 38).
    task_prompts: Vec<(String, u32, bool)>,
    task_closes: Vec<String>,
    /// `AnswerTask`s: task, seq, the option chosen (None: cancelled).
    task_answers: Vec<(String, u32, Option<String>)>,
    task_orphans: Vec<(String, u32)>,
    /// `Output::ToPeer`, in order.
    to_peers: Vec<crate::hub::PeerSend>,
    /// `Output::CheckProcesses`, in order (`hub::liveness`).
    process_checks: Vec<Vec<(String, crate::hub::WatchedProcess)>>,
}

impl Drained {
    fn lines(&self, c: ConnId) -> &[HubLine] {
        self.conns.get(&c).map_or(&[], |o| o.lines.as_slice())
    }

    fn untouched(&self, c: ConnId) -> bool {
        !self.conns.contains_key(&c)
    }

    fn closed(&self, c: ConnId) -> bool {
        self.conns.get(&c).is_some_and(|o| o.closed)
    }

    /// The error message of `c`'s final line; panics when the final line is not an error.
    fn error(&self, c: ConnId) -> &str {
        match self.lines(c) {
            [.., HubLine::Error { message }] => message,
            other => panic!("conn {c}: expected an error line, got {other:?}"),
        }
    }

    /// The envelope delivered to `c`, parsed; panics when none was.
    fn envelope(&self, c: ConnId) -> Value {
        let text = self.envelope_text(c);
        serde_json::from_str(text).expect("delivered envelope is JSON")
    }

    fn envelope_text(&self, c: ConnId) -> &str {
        match self.conns.get(&c).and_then(|o| o.delivered.as_deref()) {
            Some(t) => t,
            None => panic!("conn {c}: expected a delivery, got {:?}", self.lines(c)),
        }
    }

    fn delivered_id(&self, c: ConnId) -> String {
        self.envelope(c)["id"]
            .as_str()
            .expect("id is a string")
            .to_owned()
    }

    fn refused_ids(&self) -> Vec<&str> {
        self.audit
            .iter()
            .filter_map(|e| match e {
                AuditEvent::Refused { id, .. } => Some(id.as_str()),
                _ => None,
            })
            .collect()
    }

    fn accepted_ids(&self) -> Vec<String> {
        self.audit
            .iter()
            .filter_map(|e| match e {
                AuditEvent::Accepted { envelope, .. } => {
                    let v: Value =
                        serde_json::from_str(envelope).expect("audited envelope is JSON");
                    Some(v["id"].as_str().expect("id").to_owned())
                }
                _ => None,
            })
            .collect()
    }
}

/// The hub plus a stand-in for the IO loop, on a virtual clock.
struct Sim {
    hub: Hub,
    base: Instant,
    elapsed: Duration,
    wall: DateTime<Utc>,
    next_conn: ConnId,
    next_id: u64,
    /// Outputs collected but not yet handed to the test.
    out: Drained,
    /// Connections the hub closed; any later write to them, or a second close, is a core bug.
    closed_by_hub: BTreeSet<ConnId>,
    /// Closed by the hub but not yet reported back through `handle_closed`.
    to_release: BTreeSet<ConnId>,
    /// Connections with a delivery whose outcome the IO has not yet reported.
    delivering: BTreeSet<ConnId>,
    /// The fake store: how it answers the next batches.
    store: FakeStore,
    /// The audit log fails every batch written while this is set.
    audit_fails: bool,
    /// Batches are kept in `batches` unexecuted (a batch in flight) instead of written.
    hold_batches: bool,
    batches: Vec<Batch>,
    /// Batches that asked for a flush, with the test's label for each (`commit_unflushed`).
    flush_labels: Vec<(u64, u64)>,
    next_label: Option<u64>,
}

/// How the simulation's store answers a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
enum FakeStore {
    #[default]
    Ok,
    /// Batches that carry sends fail (a full store); acks and removals still go in.
    Full,
    /// Every batch fails.
    Failing,
}

impl Sim {
    fn new() -> Sim {
        Sim::with_limits(|_| {})
    }

    /// `Limits::example()` with short handshake deadlines, then `tweak`.
    fn with_limits(tweak: impl FnOnce(&mut Limits)) -> Sim {
        Sim::build(false, tweak)
    }

    fn build(durable: bool, tweak: impl FnOnce(&mut Limits)) -> Sim {
        let mut limits = Limits::example();
        limits.hello_timeout_ms = HELLO_MS;
        limits.verb_timeout_ms = VERB_MS;
        tweak(&mut limits);
        let roster = Roster::parse(ROSTER).expect("test roster is valid");
        Sim {
            hub: Hub::new(
                roster,
                limits,
                Box::new(crate::kernel::ids::SeededIds::new(SEED)),
            )
            .with_durable(durable),
            base: crate::kernel::deadline::test_origin(),
            elapsed: Duration::ZERO,
            wall: DateTime::parse_from_rfc3339("2026-07-21T06:40:51Z")
                .expect("fixed time")
                .with_timezone(&Utc),
            next_conn: 1,
            next_id: 1,
            out: Drained::default(),
            closed_by_hub: BTreeSet::new(),
            to_release: BTreeSet::new(),
            delivering: BTreeSet::new(),
            store: FakeStore::Ok,
            audit_fails: false,
            hold_batches: false,
            batches: Vec::new(),
            flush_labels: Vec::new(),
            next_label: None,
        }
    }

    /// A hub that emits store operations, as with `[store] kind = "sqlite"` (SPEC §12.1).
    fn durable() -> Sim {
        Sim::durable_with_limits(|_| {})
    }

    fn durable_with_limits(tweak: impl FnOnce(&mut Limits)) -> Sim {
        Sim::build(true, tweak)
    }

    fn now(&self) -> Now {
        Now {
            mono: self.base + self.elapsed,
            wall: self.wall,
        }
    }

    /// Milliseconds from the start of the simulation to the hub's next deadline.
    fn next_deadline_ms(&self) -> Option<u128> {
        self.hub
            .poll_timeout()
            .map(|at| (at - self.base).as_millis())
    }

    // ----- raw inputs -----

    fn connect(&mut self, c: ConnId) {
        let now = self.now();
        self.hub.handle_connect(c, now);
    }

    /// Accepts a fresh connection.
    fn open(&mut self) -> ConnId {
        let c = self.next_conn;
        self.next_conn += 1;
        self.connect(c);
        c
    }

    fn line(&mut self, c: ConnId, text: &str) {
        self.raw_line(c, text.as_bytes());
    }

    fn raw_line(&mut self, c: ConnId, bytes: &[u8]) {
        let now = self.now();
        self.hub.handle_line(c, bytes, now);
    }

    fn eof(&mut self, c: ConnId) {
        let now = self.now();
        self.hub.handle_eof(c, now);
    }

    fn closed(&mut self, c: ConnId, flushed: bool) {
        self.to_release.remove(&c);
        self.delivering.remove(&c);
        let now = self.now();
        self.hub.handle_closed(
            c,
            flushed,
            if flushed { "closed" } else { "peer reset" },
            now,
        );
    }

    /// The socket accepted the first byte of `c`'s delivery.
    fn committed(&mut self, c: ConnId) {
        let now = self.now();
        self.hub.handle_delivery_committed(c, now);
    }

    /// The loop's commit point with a healthy store and audit log: each batch the core emits
    /// is written (its records join the audit log after the outputs already drained) and
    /// reported back.
    fn commit_ok(&mut self) {
        self.commit_point();
    }

    /// The commit point with an audit log that fails every write: nothing staged reaches it.
    fn commit_err(&mut self) {
        self.audit_fails = true;
        self.commit_point();
        self.audit_fails = false;
    }

    /// A new loop iteration reaching its commit point: the loop's `handle_timeout`, then the
    /// core's `handle_commit_point`, then its outputs (batches executed as they come).
    fn commit_point(&mut self) {
        self.collect();
        let now = self.now();
        self.hub.handle_timeout(now);
        self.hub.handle_commit_point(now, false);
        self.collect();
    }

    /// What the server's `write_batch` does, against the fake store and audit log.
    fn execute(&mut self, batch: Batch) {
        let sends = batch
            .audit
            .iter()
            .any(|e| matches!(e, AuditEvent::Accepted { .. }));
        let result = match self.store {
            FakeStore::Failing => Err("the queue store could not be written (disk full)"),
            FakeStore::Full if sends => Err("the queue store could not be written (disk full)"),
            _ if self.audit_fails => Err("the audit log could not be written (disk full)"),
            _ => Ok(()),
        };
        if result.is_ok() {
            self.out.audit.extend(batch.audit);
            self.out.store.extend(batch.store_ops);
            if batch.sync {
                let label = self.next_label.take().unwrap_or(batch.id);
                self.flush_labels.push((label, batch.id));
            }
        }
        let now = self.now();
        self.hub
            .handle_committed(batch.id, result.map_err(StoreFailure::new), now);
    }

    /// Executes the batches held in flight (`hold_batches`), with the store as it is now.
    fn release_batches(&mut self) {
        self.hold_batches = false;
        for b in std::mem::take(&mut self.batches) {
            self.execute(b);
        }
        self.collect();
    }

    /// Moves the virtual clock and lets the hub expire its deadlines, as the loop does.
    fn advance(&mut self, ms: u64) {
        self.elapsed += Duration::from_millis(ms);
        self.wall += chrono::Duration::milliseconds(ms as i64);
        let now = self.now();
        self.hub.handle_timeout(now);
    }

    /// The IO layer succeeds at everything pending: each delivery is taken in full and each
    /// connection the hub closed is released with everything flushed.
    fn io_flush(&mut self) {
        for c in std::mem::take(&mut self.to_release) {
            if self.delivering.contains(&c) {
                self.committed(c);
            }
            self.closed(c, true);
        }
    }

    // ----- outputs -----

    /// Pulls the hub's outputs into `self.out`, checking the output contract as it goes.
    fn collect(&mut self) {
        while let Some(o) = self.hub.poll_output() {
            match o {
                Output::Write { conn, line } | Output::Handoff { conn, line }
                    if self.closed_by_hub.contains(&conn) =>
                {
                    panic!("conn {conn}: wrote {line:?} after Close");
                }
                Output::Write { conn, line } => {
                    let decoded = decode(&line);
                    assert!(
                        !matches!(decoded, HubLine::Envelope(_)),
                        "envelopes go out as Handoff"
                    );
                    self.out.conns.entry(conn).or_default().lines.push(decoded);
                }
                Output::Handoff { conn, line } => {
                    let HubLine::Envelope(text) = decode(&line) else {
                        panic!("Handoff carried {line:?}")
                    };
                    let got = self.out.conns.entry(conn).or_default();
                    assert!(got.delivered.is_none(), "conn {conn}: a second delivery");
                    got.lines.push(HubLine::Envelope(text.clone()));
                    got.delivered = Some(text.clone());
                    self.out
                        .deliveries
                        .push((conn, serde_json::from_str(&text).expect("envelope is JSON")));
                    self.delivering.insert(conn);
                }
                Output::Close { conn, .. } => {
                    assert!(self.closed_by_hub.insert(conn), "conn {conn}: closed twice");
                    self.to_release.insert(conn);
                    self.out.conns.entry(conn).or_default().closed = true;
                }
                // The exchange is over: for these tests as good as closed. The IO releases it
                // at `io_flush`, as if the client closed at once; a line sent before that gets
                // the §4.3 error and a Close (`tests/pipelining.rs`).
                Output::Answered { conn } => {
                    assert!(
                        !self.closed_by_hub.contains(&conn),
                        "conn {conn}: answered after Close"
                    );
                    self.to_release.insert(conn);
                    self.out.conns.entry(conn).or_default().closed = true;
                }
                Output::Audit(e) => self.out.audit.push(e),
                Output::Commit(b) if self.hold_batches => self.batches.push(b),
                Output::Commit(b) => self.execute(b),
                Output::LogError(l) => {
                    assert!(!l.contains("tok-"), "a token reached the service log: {l}");
                    self.out.logs.push(l);
                }
                Output::Forward {
                    peer,
                    seq,
                    envelope,
                } => self.out.forwards.push((peer, seq, envelope.to_string())),
                Output::ForwardAck {
                    peer,
                    ack_id,
                    error,
                } => self.out.forward_acks.push((peer, ack_id, error)),
                Output::Log(l) => {
                    assert!(!l.contains("tok-"), "a token reached the service log: {l}");
                    self.out.logs.push(l);
                }
                Output::StartTask(spec) => self.out.task_starts.push(*spec),
                Output::CancelTask { task } => self.out.task_cancels.push(task.as_str().to_owned()),
                Output::PromptTask {
                    task,
                    turn,
                    interrupt,
                    ..
                } => self
                    .out
                    .task_prompts
                    .push((task.as_str().to_owned(), turn, interrupt)),
                Output::CloseTask { task } => self.out.task_closes.push(task.as_str().to_owned()),
                Output::AnswerTask { task, seq, answer } => {
                    self.out
                        .task_answers
                        .push((task.as_str().to_owned(), seq, answer.option_id))
                }
                Output::KillOrphan { task, pid } => self.out.task_orphans.push((task, pid)),
                Output::ToPeer(send) => self.out.to_peers.push(*send),
                Output::CheckProcesses(w) => self.out.process_checks.push(w),
            }
        }
    }

    /// Everything emitted since the previous drain.
    fn drain(&mut self) -> Drained {
        self.collect();
        std::mem::take(&mut self.out)
    }

    // ----- protocol helpers -----

    fn fresh_id(&mut self) -> String {
        let id = format!("env-{:04}", self.next_id);
        self.next_id += 1;
        id
    }

    /// A new connection authenticated as `name`; its `ok` line is checked and removed.
    fn login(&mut self, name: &str) -> ConnId {
        let c = self.open();
        self.line(c, &hello_text(name, &token(name)));
        self.collect();
        let got = self.out.conns.remove(&c).expect("a hello gets a reply");
        assert_eq!(got.lines, [HubLine::Ok], "login of {name}");
        assert!(!got.closed);
        c
    }

    /// `from` logs in and sends one envelope with an empty body; not yet committed.
    fn send(&mut self, from: &str, to: &str, kind: &str, corr: Option<&str>) -> (ConnId, String) {
        self.send_body(from, to, kind, corr, "{}")
    }

    fn send_body(
        &mut self,
        from: &str,
        to: &str,
        kind: &str,
        corr: Option<&str>,
        body: &str,
    ) -> (ConnId, String) {
        let c = self.login(from);
        let id = self.fresh_id();
        self.line(c, &send_text(&id, to, kind, corr, body));
        (c, id)
    }

    /// A send that is committed and whose `accepted` reply is flushed; returns the id.
    fn sent(&mut self, from: &str, to: &str, kind: &str, corr: Option<&str>) -> String {
        let (c, id) = self.send(from, to, kind, corr);
        self.commit_ok();
        self.collect();
        assert_eq!(
            self.out.conns.remove(&c).expect("a reply").lines,
            [accepted(id.clone())]
        );
        self.closed(c, true);
        id
    }

    /// `name` logs in and sends an await line.
    fn await_(
        &mut self,
        name: &str,
        reply_to: Option<&str>,
        kind: Option<&str>,
        timeout_secs: Option<u64>,
    ) -> ConnId {
        let c = self.login(name);
        self.line(c, &await_text(reply_to, kind, timeout_secs));
        c
    }

    /// An unfiltered await with no timeout.
    fn park(&mut self, name: &str) -> ConnId {
        self.await_(name, None, None, None)
    }

    fn queued_ids(&self, agent: &str) -> Vec<String> {
        self.hub
            .router()
            .queued(agent)
            .map(|q| q.id.to_string())
            .collect()
    }

    fn parked(&self, agent: &str) -> usize {
        self.hub.stats(agent).parked
    }
}

fn decode(line: &str) -> HubLine {
    let body = line
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("line without its newline: {line:?}"));
    assert!(!body.contains('\n'), "one line per write: {line:?}");
    HubLine::decode(body.as_bytes()).unwrap_or_else(|e| panic!("the client rejects {line:?}: {e}"))
}

// ===== durable queues, acknowledged delivery, idempotent send, status (SPEC §12) =====

use crate::hub::durable::{StoredEnvelope, StoredId};

/// An await line; `ack` absent when None, so `ack_await_text(…, None)` is the 004 line.
fn ack_await_text(
    reply_to: Option<&str>,
    kind: Option<&str>,
    timeout_secs: Option<u64>,
    ack: Option<bool>,
) -> String {
    let mut v = json!({"await": {"replyTo": reply_to, "kind": kind, "timeoutSecs": timeout_secs}});
    if let Some(ack) = ack {
        v["await"]["ack"] = json!(ack);
    }
    v.to_string()
}

fn ack_text(id: &str) -> String {
    json!({"ack": {"id": id}}).to_string()
}

fn status_text(id: &str) -> String {
    json!({"status": {"id": id}}).to_string()
}

/// The `at` the hub reports for a state reached `ms` after the simulation's start.
fn at(ms: i64) -> Option<String> {
    let t = DateTime::parse_from_rfc3339("2026-07-21T06:40:51Z")
        .expect("fixed time")
        .with_timezone(&Utc)
        + chrono::Duration::milliseconds(ms);
    Some(t.to_rfc3339_opts(SecondsFormat::Millis, true))
}

impl Drained {
    /// The audit events other than `connected` and `authenticated`.
    fn events(&self) -> Vec<&AuditEvent> {
        self.audit
            .iter()
            .filter(|e| {
                !matches!(
                    e,
                    AuditEvent::Connected { .. } | AuditEvent::Authenticated { .. }
                )
            })
            .collect()
    }

    /// `(conn, id, reason, attempts)` of every `requeued` record, in order.
    fn requeued(&self) -> Vec<(ConnId, String, String, u32)> {
        self.audit
            .iter()
            .filter_map(|e| match e {
                AuditEvent::Requeued {
                    conn,
                    id,
                    reason,
                    attempts,
                    ..
                } => Some((*conn, id.clone(), reason.clone(), *attempts)),
                _ => None,
            })
            .collect()
    }

    fn removes(&self) -> Vec<u64> {
        self.store
            .iter()
            .filter_map(|op| match op {
                StoreOp::Remove { seq } => Some(*seq),
                _ => None,
            })
            .collect()
    }

    /// `(id, state)` of every store `State` operation, in order.
    fn states(&self) -> Vec<(String, String)> {
        self.store
            .iter()
            .filter_map(|op| match op {
                StoreOp::State { id, state, .. } => Some((id.clone(), state.clone())),
                _ => None,
            })
            .collect()
    }

    /// The `seq` the store was told to insert envelope `id` under.
    fn inserted_seq(&self, id: &str) -> u64 {
        self.store
            .iter()
            .find_map(|op| match op {
                StoreOp::Insert { seq, id: i, .. } if i == id => Some(*seq),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no Insert of {id} in {:?}", self.store))
    }
}

impl Sim {
    /// `name` logs in and sends an unfiltered await without a timeout that asks for ack mode.
    fn await_ack(&mut self, name: &str) -> ConnId {
        let c = self.login(name);
        self.line(c, &ack_await_text(None, None, None, Some(true)));
        c
    }

    fn ack(&mut self, c: ConnId, id: &str) {
        self.line(c, &ack_text(id));
    }

    /// `from` sends an envelope with a chosen id (and body); not yet committed.
    fn send_id(
        &mut self,
        from: &str,
        id: &str,
        to: &str,
        kind: &str,
        corr: Option<&str>,
        body: &str,
    ) -> ConnId {
        let c = self.login(from);
        self.line(c, &send_text(id, to, kind, corr, body));
        c
    }

    /// A send with a chosen id that is committed and answered `accepted`.
    fn sent_id(&mut self, from: &str, id: &str, to: &str) {
        let c = self.send_id(from, id, to, "task", None, "{}");
        self.commit_ok();
        self.collect();
        assert_eq!(
            self.out.conns.remove(&c).expect("a reply").lines,
            [accepted(id.to_owned())]
        );
        self.closed(c, true);
    }

    /// A whole ack-mode delivery to `name`: await, first byte, ack, commit, `acked`, close.
    /// Returns the id acked.
    fn acked(&mut self, name: &str) -> String {
        let c = self.await_ack(name);
        self.collect();
        let id = {
            let got = self
                .out
                .conns
                .get(&c)
                .and_then(|o| o.delivered.clone())
                .expect("a delivery");
            serde_json::from_str::<Value>(&got).expect("JSON")["id"]
                .as_str()
                .expect("id")
                .to_owned()
        };
        self.committed(c);
        self.ack(c, &id);
        self.commit_ok();
        self.collect();
        let got = self.out.conns.remove(&c).expect("lines");
        assert_eq!(got.lines.last(), Some(&HubLine::Acked { id: id.clone() }));
        assert!(got.closed);
        self.closed(c, true);
        id
    }

    /// `asker` asks where envelope `id` is; the one reply line, decoded.
    fn status(&mut self, asker: &str, id: &str) -> EnvelopeStatus {
        let c = self.login(asker);
        self.line(c, &status_text(id));
        self.collect();
        let got = self.out.conns.remove(&c).expect("a status reply");
        assert!(got.closed, "status is the connection's one verb");
        self.closed(c, true);
        match got.lines.as_slice() {
            [HubLine::Status(st)] => st.clone(),
            other => panic!("expected one status line, got {other:?}"),
        }
    }
}

// ----- stored rows, for restarts (SPEC §12.1) -----

fn stored(seq: u64, agent: &str, id: &str, sender: &str, attempts: u32) -> StoredEnvelope {
    let env = Envelope::new(
        id.into(),
        sender.into(),
        agent.into(),
        "2026-07-21T06:40:51Z".into(),
        "task".into(),
        None,
        "{}".into(),
    )
    .expect("valid body");
    StoredEnvelope {
        seq,
        agent: agent.into(),
        id: id.into(),
        sender: sender.into(),
        kind: "task".into(),
        correlation_id: None,
        text: env.to_json().into(),
        attempts,
    }
}

fn remembered(seq: u64, sender: &str, id: &str, to: &str, state: &str, ms: i64) -> StoredId {
    StoredId {
        seq,
        sender: sender.into(),
        id: id.into(),
        to: to.into(),
        digest: ledger::digest(to, "task", None, "{}"),
        accepted_ms: ms,
        state: state.into(),
        detail: None,
        state_ms: ms,
        reader: None,
    }
}

// ----- flushes (SPEC §12.1, sync = "full") -----

impl Sim {
    /// `commit_ok` with a store that flushes to disk (`store.sync = "full"`): the batch is
    /// written and waits for its flush, which the test calls `label`.
    fn commit_unflushed(&mut self, label: u64) {
        self.hub.commit.sync = true;
        self.next_label = Some(label);
        self.commit_ok();
        self.hub.commit.sync = false;
        assert!(self.next_label.is_none(), "the batch asked for no flush");
    }

    /// The store's flush of every batch up to the one labelled `through` finished.
    fn flushed(&mut self, through: u64, result: Result<(), String>) {
        let batch = self
            .flush_labels
            .iter()
            .filter(|&&(label, _)| label <= through)
            .map(|&(_, id)| id)
            .max()
            .unwrap_or(0);
        let now = self.now();
        self.hub
            .handle_synced(batch, result.map_err(StoreFailure::new), now);
    }
}

mod ack;
mod activity;
mod await_;
mod commit;
mod commit_failure;
mod delivery_and_loss;
mod flush;
mod forward;
mod hello_and_lines;
mod idempotence_status;
mod ids;
mod leases;
mod linger;
mod liveness;
mod pipelining;
mod prompts;
mod receipts;
mod redelivery;
mod remote_presence;
mod restore;
mod roster_reload;
mod scale;
mod send;
mod shutdown;
mod strangers;
mod tasks;
mod warning;
mod who;
