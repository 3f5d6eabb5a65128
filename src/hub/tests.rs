//! Deterministic simulation tests of the sans-IO `Hub` (SPEC §4–§5, wire-compat.md).
//!
//! Owns the `Sim` harness: a hub on a virtual clock, driven the way the IO loop drives it
//! (lines in, the commit point, each `Output::Commit` executed against a fake store and audit
//! log that can be told to fail and reported back, delivery outcomes reported back), with
//! every output decoded through the client's own `HubLine::decode`. Refuses sockets, threads,
//! sleeps and the real clock: time moves only through `Sim::advance`.

use super::*;
use crate::store::Loaded;
use crate::wire::{Envelope, EnvelopeStatus, HubLine};
use chrono::SecondsFormat;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

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
    store: Vec<crate::store::StoreOp>,
    /// `Output::Forward`s: (peer, seq, envelope text).
    forwards: Vec<(String, u64, String)>,
    /// `Output::ForwardAck`s: (peer, ack_id, error).
    forward_acks: Vec<(String, String, Option<String>)>,
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
                Box::new(crate::hub::ids::SeededIds::new(SEED)),
            )
            .with_durable(durable),
            base: crate::deadline::test_origin(),
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
            .handle_committed(batch.id, result.map_err(str::to_owned), now);
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
            [HubLine::Accepted { id: id.clone() }]
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
            .map(|q| q.id.clone())
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

// ===== handshake (SPEC §4, wire-compat "Connection flow") =====

#[test]
fn hello_with_the_roster_token_gets_ok_and_is_audited() {
    let mut sim = Sim::new();
    let c = sim.open();
    sim.line(c, &hello_text("mneme", "tok-mneme"));
    let d = sim.drain();
    assert_eq!(d.lines(c), [HubLine::Ok]);
    assert!(!d.closed(c), "the verb comes next on the same connection");
    assert_eq!(
        d.audit,
        [
            AuditEvent::Connected { conn: c },
            AuditEvent::Authenticated {
                conn: c,
                name: "mneme".into()
            }
        ]
    );
}

#[test]
fn hello_with_a_wrong_token_gets_one_error_and_close() {
    let mut sim = Sim::new();
    let c = sim.open();
    // Another agent's valid token is still the wrong token for this name.
    sim.line(c, &hello_text("mneme", "tok-datastore"));
    let d = sim.drain();
    assert_eq!(d.lines(c).len(), 1);
    assert!(
        d.error(c).starts_with("authentication failed"),
        "{}",
        d.error(c)
    );
    assert!(d.closed(c));
    assert!(d.audit.contains(&AuditEvent::AuthFailed {
        conn: c,
        name: Some("mneme".into())
    }));
}

#[test]
fn hello_with_an_unknown_name_fails_like_a_wrong_token() {
    let mut sim = Sim::new();
    let wrong = sim.open();
    sim.line(wrong, &hello_text("mneme", "nope"));
    let unknown = sim.open();
    sim.line(unknown, &hello_text("ghost", "tok-mneme"));
    let d = sim.drain();
    // The same text for both, so the reply does not reveal which names exist.
    assert_eq!(d.lines(unknown), d.lines(wrong));
    assert!(d.closed(unknown));
    // A name not on the roster is not recorded: it may be a token sent in the wrong field.
    assert!(d.audit.contains(&AuditEvent::AuthFailed {
        conn: unknown,
        name: None
    }));
}

#[test]
fn a_first_line_that_is_not_hello_is_refused() {
    let mut sim = Sim::new();
    let c = sim.open();
    sim.line(c, &await_text(None, None, None));
    let d = sim.drain();
    assert_eq!(d.error(c), "expected hello as the first line, got await");
    assert!(d.closed(c));
    assert_eq!(sim.parked("mneme"), 0);
}

#[test]
fn a_second_hello_is_refused() {
    let mut sim = Sim::new();
    let c = sim.login("mneme");
    sim.line(c, &hello_text("datastore", "tok-datastore"));
    let d = sim.drain();
    assert_eq!(d.error(c), "a second hello on one connection");
    assert!(d.closed(c));
    // The connection stays mneme's: the second hello authenticated nobody.
    assert!(!d
        .audit
        .iter()
        .any(|e| matches!(e, AuditEvent::Authenticated { name, .. } if name == "datastore")));
}

#[test]
fn malformed_json_is_refused_before_and_after_hello() {
    let mut sim = Sim::new();
    let before = sim.open();
    sim.line(before, "{\"hello\":");
    let after = sim.login("mneme");
    sim.line(after, "{\"send\":{\"id\":\"x\"}} trailing");
    let unknown_tag = sim.login("mneme");
    sim.line(unknown_tag, "{\"presence\":{}}");
    let d = sim.drain();
    for c in [before, after, unknown_tag] {
        assert!(
            d.error(c).starts_with("malformed line"),
            "conn {c}: {}",
            d.error(c)
        );
        assert_eq!(d.lines(c).len(), 1, "one error line and nothing else");
        assert!(d.closed(c));
    }
}

#[test]
fn invalid_utf8_is_refused() {
    let mut sim = Sim::new();
    let c = sim.open();
    sim.raw_line(c, b"{\"hello\":{\"name\":\"mn\xffeme\",\"token\":\"t\"}}");
    let verb = sim.login("mneme");
    sim.raw_line(verb, b"\xc3\x28");
    let d = sim.drain();
    assert_eq!(d.error(c), "line is not valid UTF-8");
    assert_eq!(d.error(verb), "line is not valid UTF-8");
    assert!(d.closed(c) && d.closed(verb));
}

#[test]
fn an_overlong_line_gets_the_io_layers_error() {
    let mut sim = Sim::new();
    let c = sim.login("mneme");
    let now = sim.now();
    sim.hub
        .handle_bad_input(c, "line exceeds the limit of 1048576 bytes", now);
    let d = sim.drain();
    assert_eq!(d.error(c), "line exceeds the limit of 1048576 bytes");
    assert!(d.closed(c));
}

#[test]
fn the_hello_deadline_expires_exactly_at_the_limit() {
    let mut sim = Sim::new();
    let c = sim.open();
    assert_eq!(sim.next_deadline_ms(), Some(HELLO_MS as u128));
    sim.advance(HELLO_MS - 1);
    assert!(sim.drain().untouched(c), "not one millisecond early");
    sim.advance(1);
    let d = sim.drain();
    assert_eq!(d.error(c), "no hello within 1000 ms");
    assert!(d.closed(c));
    assert_eq!(sim.next_deadline_ms(), None);
}

#[test]
fn the_verb_deadline_counts_from_the_ok_line() {
    let mut sim = Sim::new();
    let c = sim.open();
    sim.advance(500);
    sim.line(c, &hello_text("mneme", "tok-mneme"));
    sim.drain();
    // The hello deadline is replaced, not added to.
    assert_eq!(sim.next_deadline_ms(), Some(500 + VERB_MS as u128));
    sim.advance(VERB_MS - 1);
    assert!(sim.drain().untouched(c));
    sim.advance(1);
    let d = sim.drain();
    assert_eq!(d.error(c), "no verb within 2000 ms");
    assert!(d.closed(c));
}

#[test]
fn peer_eof_before_the_verb_closes_without_a_reply() {
    let mut sim = Sim::new();
    let c = sim.login("mneme");
    sim.eof(c);
    let d = sim.drain();
    assert_eq!(d.lines(c), []);
    assert!(d.closed(c));
    assert_eq!(sim.next_deadline_ms(), None, "its verb deadline is gone");
}

// ===== send (SPEC §3, §5.1) =====

#[test]
fn a_send_is_accepted_only_after_its_audit_record_is_committed() {
    let mut sim = Sim::new();
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    let d = sim.drain();
    assert!(d.untouched(c), "no reply before the commit");
    assert!(sim.hub.has_staged());
    assert_eq!(
        sim.next_deadline_ms(),
        None,
        "a staged send has no verb deadline"
    );
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.lines(c), [HubLine::Accepted { id: id.clone() }]);
    assert!(d.closed(c));
    assert_eq!(d.accepted_ids(), std::slice::from_ref(&id));
    assert_eq!(sim.queued_ids("datastore"), [id]);
    assert!(!sim.hub.has_staged());
}

#[test]
fn send_stamps_from_with_the_authenticated_name() {
    let mut sim = Sim::new();
    let w = sim.park("datastore");
    // send_text claims from = "forged"; the hub must not believe it.
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.lines(c), [HubLine::Accepted { id: id.clone() }]);
    let env = d.envelope(w);
    assert_eq!(env["from"], "mneme");
    assert_eq!(env["id"], id.as_str());
    assert_eq!(env["to"], "datastore");
    assert_eq!(
        env["correlationId"],
        Value::Null,
        "correlationId is always present"
    );
    // The audit record holds the same stamped text the reader got.
    let audited = d
        .audit
        .iter()
        .find_map(|e| match e {
            AuditEvent::Accepted {
                conn: Some(conn),
                envelope,
            } if *conn == c => Some(envelope.clone()),
            _ => None,
        })
        .expect("the accepted envelope is audited");
    assert_eq!(&*audited, d.envelope_text(w));
}

#[test]
fn the_body_passes_through_byte_for_byte() {
    let mut sim = Sim::new();
    let body = r#"{"z":1,"a":[1.0,2e3],"big":123456789012345678901234567890,"s":"\u00e9\n"}"#;
    let (_, _) = sim.send_body("mneme", "datastore", "task", None, body);
    sim.commit_ok();
    sim.drain();
    let w = sim.park("datastore");
    let d = sim.drain();
    let text = d.envelope_text(w);
    assert!(text.ends_with(&format!(",\"body\":{body}}}")), "{text}");
}

#[test]
fn send_of_kind_bounce_is_refused() {
    let mut sim = Sim::new();
    let (c, _) = sim.send("mneme", "datastore", "bounce", Some("x"));
    let d = sim.drain();
    assert_eq!(
        d.error(c),
        "invalid envelope: kind \"bounce\" is reserved for the hub"
    );
    assert!(d.closed(c));
    assert!(!sim.hub.has_staged());
    assert!(sim.queued_ids("datastore").is_empty());
}

#[test]
fn a_send_to_the_hub_itself_is_refused_in_any_case() {
    for to in ["hub", "HUB", "Hub"] {
        let mut sim = Sim::new();
        let (c, _) = sim.send("mneme", to, "task", None);
        let d = sim.drain();
        assert_eq!(
            d.error(c),
            "invalid envelope: to \"hub\" names the hub itself, which receives nothing"
        );
        assert!(!sim.hub.has_staged());
        assert!(sim.queued_ids(to).is_empty());
    }
}

#[test]
fn the_hub_wide_byte_cap_refuses_across_agents() {
    // Each of these envelopes is the same size; room for exactly two of them.
    let mut probe = Sim::new();
    probe.sent("mneme", "x1", "task", None);
    let size = probe.hub.stats("x1").queued_bytes;
    let mut sim = Sim::with_limits(|l| l.hub_max_bytes = 2 * size + size / 2);
    let a = sim.sent("mneme", "x1", "task", None);
    let b = sim.sent("mneme", "x2", "task", None);
    assert_eq!(
        (sim.queued_ids("x1"), sim.queued_ids("x2")),
        (vec![a], vec![b])
    );
    let (c, _) = sim.send("mneme", "x3", "task", None);
    sim.commit_ok();
    let d = sim.drain();
    assert!(d.error(c).contains("across all agents"), "{}", d.error(c));
    assert!(sim.queued_ids("x3").is_empty());
}

#[test]
fn a_send_to_an_agent_not_on_the_roster_is_queued() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "newcomer", "task", None);
    assert_eq!(sim.queued_ids("newcomer"), [id]);
}

// ===== routing (SPEC §5.2) =====

#[test]
fn routing_prefers_reply_to_and_kind_then_reply_to_then_kind_then_unfiltered() {
    let mut sim = Sim::new();
    // Parked least specific first, so specificity must beat age.
    let any = sim.park("mneme");
    let kind = sim.await_("mneme", None, Some("result"), None);
    let reply = sim.await_("mneme", Some("task-1"), None, None);
    let both = sim.await_("mneme", Some("task-1"), Some("result"), None);
    sim.drain();
    for expected in [both, reply, kind, any] {
        let (_, id) = sim.send("datastore", "mneme", "result", Some("task-1"));
        sim.commit_ok();
        let d = sim.drain();
        assert_eq!(d.deliveries.len(), 1);
        assert_eq!(
            d.delivered_id(expected),
            id,
            "expected conn {expected} to win"
        );
        sim.io_flush();
    }
    assert_eq!(sim.parked("mneme"), 0);
}

#[test]
fn routing_is_oldest_first_within_a_tier() {
    let mut sim = Sim::new();
    let waiters = [
        sim.park("datastore"),
        sim.park("datastore"),
        sim.park("datastore"),
    ];
    let ids: Vec<String> = (0..3)
        .map(|_| sim.send("mneme", "datastore", "task", None).1)
        .collect();
    // One commit for all three, as one loop iteration would do.
    sim.commit_ok();
    let d = sim.drain();
    let got: Vec<(ConnId, String)> = d
        .deliveries
        .iter()
        .map(|(c, v)| (*c, v["id"].as_str().unwrap().to_owned()))
        .collect();
    let want: Vec<(ConnId, String)> = waiters.into_iter().zip(ids).collect();
    assert_eq!(got, want);
}

#[test]
fn filters_conjoin() {
    let mut sim = Sim::new();
    let w = sim.await_("mneme", Some("task-1"), Some("result"), None);
    let wrong_kind = sim.sent("datastore", "mneme", "task", Some("task-1"));
    let wrong_corr = sim.sent("datastore", "mneme", "result", Some("task-2"));
    let no_corr = sim.sent("datastore", "mneme", "result", None);
    let d = sim.drain();
    assert!(d.deliveries.is_empty(), "each passes one filter only");
    assert_eq!(
        sim.queued_ids("mneme"),
        [wrong_kind.clone(), wrong_corr.clone(), no_corr.clone()]
    );
    let right = sim.sent("datastore", "mneme", "result", Some("task-1"));
    let d = sim.drain();
    assert_eq!(d.delivered_id(w), right);
    // A queued envelope is matched by the same conjunction.
    let late = sim.await_("mneme", Some("task-2"), Some("task"), Some(0));
    let d = sim.drain();
    assert_eq!(d.lines(late), [HubLine::Timeout]);
    assert_eq!(sim.queued_ids("mneme"), [wrong_kind, wrong_corr, no_corr]);
}

#[test]
fn await_takes_the_first_matching_envelope_in_fifo_order() {
    let mut sim = Sim::new();
    let t1 = sim.sent("datastore", "mneme", "task", None);
    let r_a = sim.sent("datastore", "mneme", "result", Some("a"));
    let r_b = sim.sent("datastore", "mneme", "result", Some("b"));
    let t2 = sim.sent("datastore", "mneme", "task", None);
    sim.drain();
    let order = [
        (Some("b"), None, r_b),
        (None, Some("task"), t1),
        (None, Some("result"), r_a),
        (None, None, t2),
    ];
    for (reply_to, kind, want) in order {
        let c = sim.await_("mneme", reply_to, kind, Some(0));
        let d = sim.drain();
        assert_eq!(
            d.delivered_id(c),
            want,
            "await replyTo={reply_to:?} kind={kind:?}"
        );
        sim.io_flush();
    }
    assert!(sim.queued_ids("mneme").is_empty());
}

#[test]
fn await_with_timeout_zero_polls_and_consumes_nothing() {
    let mut sim = Sim::new();
    let other = sim.sent("datastore", "mneme", "task", None);
    let c = sim.await_("mneme", None, Some("result"), Some(0));
    let d = sim.drain();
    assert_eq!(d.lines(c), [HubLine::Timeout]);
    assert!(d.closed(c));
    assert!(d.audit.contains(&AuditEvent::Timeout {
        conn: c,
        name: "mneme".into()
    }));
    assert_eq!(sim.queued_ids("mneme"), [other]);
    assert_eq!(sim.parked("mneme"), 0);
    assert_eq!(sim.next_deadline_ms(), None);
}

#[test]
fn await_times_out_exactly_at_its_timeout_and_not_before() {
    let mut sim = Sim::new();
    sim.advance(250);
    let c = sim.await_("mneme", None, None, Some(5));
    assert_eq!(
        sim.next_deadline_ms(),
        Some(5_250),
        "the verb deadline gave way to the await's"
    );
    sim.advance(4_999);
    assert!(sim.drain().untouched(c));
    assert_eq!(sim.parked("mneme"), 1);
    sim.advance(1);
    let d = sim.drain();
    assert_eq!(d.lines(c), [HubLine::Timeout]);
    assert!(d.closed(c));
    assert_eq!(sim.parked("mneme"), 0);
    // After a timeout reply, a send is queued, not handed to the finished await.
    let id = sim.sent("datastore", "mneme", "task", None);
    assert_eq!(sim.queued_ids("mneme"), [id]);
}

#[test]
fn await_without_timeout_waits_forever() {
    let mut sim = Sim::new();
    let c = sim.park("mneme");
    assert_eq!(sim.next_deadline_ms(), None);
    sim.advance(30 * 24 * 3_600 * 1_000);
    assert!(sim.drain().untouched(c));
    let id = sim.sent("datastore", "mneme", "task", None);
    assert_eq!(sim.drain().delivered_id(c), id);
}

#[test]
fn a_huge_timeout_waits_forever_instead_of_overflowing() {
    let mut sim = Sim::new();
    let c = sim.await_("mneme", None, None, Some(u64::MAX));
    sim.advance(1_000_000);
    assert!(sim.drain().untouched(c));
    assert_eq!(sim.parked("mneme"), 1);
}

// ===== delivery outcomes (SPEC §5.3) =====

#[test]
fn a_zero_byte_delivery_goes_to_the_next_matching_waiter() {
    let mut sim = Sim::new();
    let first = sim.park("datastore");
    let non_matching = sim.await_("datastore", None, Some("result"), None);
    let next = sim.park("datastore");
    let id = sim.sent("mneme", "datastore", "task", None);
    assert_eq!(sim.drain().delivered_id(first), id);
    // The socket took nothing: the envelope never left the hub.
    sim.closed(first, false);
    let d = sim.drain();
    assert!(d.audit.iter().any(
        |e| matches!(e, AuditEvent::Requeued { conn, id: i, .. } if *conn == first && *i == id)
    ));
    assert!(d.untouched(non_matching));
    assert_eq!(d.delivered_id(next), id);
    sim.io_flush();
    let d = sim.drain();
    assert!(d.audit.contains(&AuditEvent::Delivered {
        conn: next,
        id: id.clone(),
        to: "datastore".into(),
        ack: false
    }));
    assert!(!d.audit.iter().any(|e| matches!(e, AuditEvent::Lost { .. })));
}

#[test]
fn a_zero_byte_delivery_returns_to_the_queue_front() {
    let mut sim = Sim::new();
    let e1 = sim.sent("mneme", "datastore", "task", None);
    let e2 = sim.sent("mneme", "datastore", "task", None);
    let c = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(c), e1);
    assert_eq!(sim.queued_ids("datastore"), std::slice::from_ref(&e2));
    sim.closed(c, false);
    sim.drain();
    assert_eq!(
        sim.queued_ids("datastore"),
        [e1.clone(), e2],
        "order is preserved"
    );
    let again = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(again), e1);
}

/// Regression: a returned envelope was pushed to the very front, so one taken from mid-queue
/// by a filtered await jumped ahead of older envelopes.
#[test]
fn a_returned_envelope_regains_its_place_not_the_front() {
    let mut sim = Sim::new();
    let t1 = sim.sent("mneme", "datastore", "task", None);
    let r1 = sim.sent("mneme", "datastore", "result", None);
    let t2 = sim.sent("mneme", "datastore", "task", None);
    let c = sim.await_("datastore", None, Some("result"), None);
    assert_eq!(sim.drain().delivered_id(c), r1);
    sim.closed(c, false);
    sim.drain();
    assert_eq!(sim.queued_ids("datastore"), [t1, r1, t2]);
}

#[test]
fn returned_envelopes_keep_their_order_whatever_order_their_deliveries_fail_in() {
    let mut sim = Sim::new();
    let e1 = sim.sent("mneme", "datastore", "task", None);
    let e2 = sim.sent("mneme", "datastore", "task", None);
    let e3 = sim.sent("mneme", "datastore", "task", None);
    let (a, b) = (sim.park("datastore"), sim.park("datastore"));
    let d = sim.drain();
    assert_eq!(
        (d.delivered_id(a), d.delivered_id(b)),
        (e1.clone(), e2.clone())
    );
    // Meanwhile a newer envelope arrives; both returns must still come before it.
    let e4 = sim.sent("mneme", "datastore", "task", None);
    sim.closed(b, false);
    sim.closed(a, false);
    sim.drain();
    assert_eq!(sim.queued_ids("datastore"), [e1, e2, e3, e4]);
}

#[test]
fn a_partial_write_loses_the_envelope_and_bounces_it_to_the_sender() {
    let mut sim = Sim::new();
    let (sender, id) = sim.send("mneme", "datastore", "task", None);
    sim.commit_ok();
    sim.drain();
    sim.closed(sender, true);
    // The orchestrator blocks on the result, the send-and-wait composite.
    let orchestrator = sim.await_("mneme", Some(&id), None, None);
    let reader = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(reader), id);
    sim.committed(reader);
    sim.closed(reader, false);
    let d = sim.drain();
    assert_eq!(
        d.audit,
        [
            AuditEvent::Delivered {
                conn: reader,
                id: id.clone(),
                to: "datastore".into(),
                ack: false
            },
            AuditEvent::Lost {
                conn: reader,
                id: id.clone(),
                to: "datastore".into(),
                reason: "peer reset".into(),
                bounced: true
            },
        ]
    );
    assert!(
        d.untouched(orchestrator),
        "the bounce is committed like any envelope first"
    );
    assert!(
        sim.queued_ids("datastore").is_empty(),
        "a lost envelope is not requeued"
    );
    assert!(sim.hub.has_staged());
    sim.commit_ok();
    let d = sim.drain();
    let bounce = d.envelope(orchestrator);
    assert_eq!(bounce["from"], "hub");
    assert_eq!(bounce["to"], "mneme");
    assert_eq!(bounce["kind"], "bounce");
    assert_eq!(bounce["correlationId"], id.as_str());
    assert_eq!(
        bounce["ts"], "2026-07-21T06:40:51.000Z",
        "stamped from the wall clock passed in"
    );
    assert_eq!(
        bounce["body"],
        json!({"id": id, "to": "datastore", "reason": "peer reset"})
    );
    assert_ne!(bounce["id"], id.as_str());
    assert!(
        matches!(&d.audit[0], AuditEvent::Accepted { conn: None, envelope } if **envelope == *d.envelope_text(orchestrator))
    );
}

#[test]
fn a_lost_bounce_is_not_bounced_again() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let reader = sim.park("datastore");
    sim.drain();
    sim.committed(reader);
    sim.closed(reader, false);
    sim.commit_ok(); // the bounce is queued for mneme
    sim.drain();
    let orchestrator = sim.park("mneme");
    let d = sim.drain();
    assert_eq!(d.envelope(orchestrator)["correlationId"], id.as_str());
    sim.committed(orchestrator);
    sim.closed(orchestrator, false);
    let d = sim.drain();
    assert!(d.audit.iter().any(
        |e| matches!(e, AuditEvent::Lost { conn, bounced: false, .. } if *conn == orchestrator)
    ));
    assert!(!sim.hub.has_staged(), "no bounce of a bounce");
    assert!(sim.queued_ids("mneme").is_empty());
    assert!(sim.queued_ids("hub").is_empty());
}

#[test]
fn a_fully_written_delivery_is_delivered_once() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let c = sim.park("datastore");
    sim.drain();
    sim.committed(c);
    sim.committed(c); // the IO may report every write; only the first byte counts
    sim.closed(c, true);
    let d = sim.drain();
    assert_eq!(
        d.audit,
        [AuditEvent::Delivered {
            conn: c,
            id,
            to: "datastore".into(),
            ack: false
        }]
    );
    assert!(!sim.hub.has_staged());
    assert_eq!(sim.hub.open_connections(), 0);
}

// ===== dead waiters (wire-compat "Known faults") =====

#[test]
fn a_parked_waiter_that_reaches_eof_is_dropped_at_once() {
    let mut sim = Sim::new();
    let dead = sim.park("datastore");
    let alive = sim.park("datastore");
    sim.eof(dead);
    let d = sim.drain();
    assert!(d.closed(dead));
    assert_eq!(d.lines(dead), [], "nothing to say to a peer that left");
    assert_eq!(sim.parked("datastore"), 1);
    // The regression: the next send must not be "delivered" into the dead socket.
    let id = sim.sent("mneme", "datastore", "task", None);
    let d = sim.drain();
    assert!(d.untouched(dead));
    assert_eq!(d.delivered_id(alive), id);
}

#[test]
fn a_parked_waiter_whose_socket_closes_is_dropped_and_the_send_is_queued() {
    let mut sim = Sim::new();
    let dead = sim.park("datastore");
    sim.closed(dead, false);
    assert_eq!(sim.parked("datastore"), 0);
    let id = sim.sent("mneme", "datastore", "task", None);
    let d = sim.drain();
    assert!(d.deliveries.is_empty());
    assert_eq!(sim.queued_ids("datastore"), [id]);
}

#[test]
fn a_claimed_waiter_that_reaches_eof_before_the_commit_lets_the_envelope_route_on() {
    let mut sim = Sim::new();
    let claimed = sim.park("datastore");
    let (sender, id) = sim.send("mneme", "datastore", "task", None);
    assert_eq!(
        sim.parked("datastore"),
        0,
        "the staged send claimed the waiter"
    );
    sim.eof(claimed);
    let next = sim.park("datastore");
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.lines(sender), [HubLine::Accepted { id: id.clone() }]);
    assert!(d.closed(claimed));
    assert!(d.conns[&claimed].delivered.is_none());
    assert_eq!(d.delivered_id(next), id);
}

#[test]
fn a_claimed_waiter_whose_socket_closes_before_the_commit_lets_the_envelope_route_on() {
    let mut sim = Sim::new();
    let claimed = sim.park("datastore");
    let (_, id) = sim.send("mneme", "datastore", "task", None);
    sim.closed(claimed, false);
    sim.commit_ok();
    let d = sim.drain();
    assert!(d.untouched(claimed));
    assert!(d.deliveries.is_empty());
    assert_eq!(sim.queued_ids("datastore"), [id]);
}

/// Regression: a claimed waiter that reached EOF stayed `Claimed` after its Close, so later
/// input (here the IO reporting a partial last line) made the hub write to it and close it
/// a second time.
#[test]
fn a_claimed_waiter_that_reached_eof_takes_no_more_input() {
    let mut sim = Sim::new();
    let w = sim.park("datastore");
    let (_, id) = sim.send("mneme", "datastore", "task", None);
    sim.eof(w);
    let now = sim.now();
    sim.hub.handle_bad_input(w, "incomplete last line", now);
    sim.commit_ok(); // the harness panics on a write after Close or a second Close
    let d = sim.drain();
    assert_eq!(d.lines(w), []);
    assert_eq!(sim.queued_ids("datastore"), [id]);
}

// ===== queue caps (SPEC §5.5) =====

#[test]
fn a_full_queue_by_count_refuses_and_queues_nothing() {
    let mut sim = Sim::with_limits(|l| l.queue_max_envelopes = 2);
    let kept = [
        sim.sent("mneme", "datastore", "task", None),
        sim.sent("mneme", "datastore", "task", None),
    ];
    sim.drain();
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    let d = sim.drain();
    // Refused at once: there is nothing to commit.
    assert!(
        d.error(c).contains("is full (limit 2 envelopes"),
        "{}",
        d.error(c)
    );
    assert!(d.closed(c));
    assert_eq!(d.refused_ids(), [id.as_str()]);
    assert!(!sim.hub.has_staged());
    assert_eq!(sim.queued_ids("datastore"), kept);
    // Other agents' queues are not affected.
    sim.sent("mneme", "scribe", "task", None);
}

#[test]
fn a_full_queue_by_bytes_refuses_and_queues_nothing() {
    let mut sim = Sim::with_limits(|l| l.queue_max_bytes = 1_000);
    let big = format!("\"{}\"", "x".repeat(600));
    let (c1, first) = sim.send_body("mneme", "datastore", "task", None, &big);
    sim.commit_ok();
    assert_eq!(
        sim.drain().lines(c1),
        [HubLine::Accepted { id: first.clone() }]
    );
    let (c2, refused) = sim.send_body("mneme", "datastore", "task", None, &big);
    let d = sim.drain();
    assert!(d.error(c2).contains("1000 bytes"), "{}", d.error(c2));
    assert_eq!(d.refused_ids(), [refused.as_str()]);
    // A small envelope still fits under the byte cap.
    let small = sim.sent("mneme", "datastore", "task", None);
    assert_eq!(sim.queued_ids("datastore"), [first, small]);
    assert!(sim.hub.stats("datastore").queued_bytes <= 1_000);
}

#[test]
fn staged_sends_count_against_the_cap() {
    let mut sim = Sim::with_limits(|l| l.queue_max_envelopes = 1);
    let (_, staged) = sim.send("mneme", "datastore", "task", None);
    let (c, _) = sim.send("mneme", "datastore", "task", None);
    assert!(sim.drain().error(c).contains("is full"));
    sim.commit_ok();
    sim.drain();
    assert_eq!(sim.queued_ids("datastore"), [staged]);
}

#[test]
fn a_send_to_a_full_queue_still_reaches_a_parked_filtered_waiter() {
    let mut sim = Sim::with_limits(|l| l.queue_max_envelopes = 1);
    let queued = sim.sent("mneme", "datastore", "task", None);
    // The queued task does not match, so this await parks.
    let w = sim.await_("datastore", None, Some("wake"), None);
    assert_eq!(sim.parked("datastore"), 1);
    let (c, id) = sim.send("mneme", "datastore", "wake", None);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.lines(c), [HubLine::Accepted { id: id.clone() }]);
    assert_eq!(d.delivered_id(w), id);
    assert_eq!(sim.queued_ids("datastore"), [queued]);
}

#[test]
fn a_bounce_is_queued_even_when_the_senders_queue_is_full() {
    let mut sim = Sim::with_limits(|l| l.queue_max_envelopes = 1);
    sim.sent("datastore", "mneme", "task", None); // mneme's queue is now full
    let lost = sim.sent("mneme", "datastore", "task", None);
    let reader = sim.park("datastore");
    sim.drain();
    sim.committed(reader);
    sim.closed(reader, false);
    sim.commit_ok();
    // Refusing an accepted bounce would lose the only notice of the loss.
    let queued: Vec<_> = sim.hub.router().queued("mneme").cloned().collect();
    assert_eq!(queued.len(), 2);
    assert_eq!(queued[1].correlation_id.as_deref(), Some(lost.as_str()));
}

// ===== commit failure (SPEC §8) =====

#[test]
fn a_failed_commit_errors_the_sender_and_queues_nothing() {
    let mut sim = Sim::with_limits(|l| l.queue_max_envelopes = 1);
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    sim.commit_err();
    let d = sim.drain();
    assert_eq!(
        d.error(c),
        "envelope not accepted: the audit log could not be written (disk full)"
    );
    assert!(d.closed(c));
    assert_eq!(d.refused_ids(), [id.as_str()]);
    assert!(d.accepted_ids().is_empty());
    assert!(sim.queued_ids("datastore").is_empty());
    // Its reservation was released: the one-envelope queue has room again.
    let next = sim.sent("mneme", "datastore", "task", None);
    assert_eq!(sim.queued_ids("datastore"), [next]);
}

#[test]
fn a_failed_commit_reparks_the_claimed_waiter_at_its_original_position() {
    let mut sim = Sim::new();
    let oldest = sim.park("datastore");
    let middle = sim.park("datastore");
    let (c, _) = sim.send("mneme", "datastore", "task", None);
    assert_eq!(sim.parked("datastore"), 1, "oldest is claimed");
    let newest = sim.park("datastore");
    sim.commit_err();
    let d = sim.drain();
    assert!(d.error(c).starts_with("envelope not accepted"));
    assert!(d.untouched(oldest), "the waiter never knew");
    assert_eq!(sim.parked("datastore"), 3);
    // Still first in line, ahead of waiters parked after it.
    let mut got = Vec::new();
    for _ in 0..3 {
        sim.sent("mneme", "datastore", "task", None);
        got.push(sim.drain().deliveries[0].0);
    }
    assert_eq!(got, [oldest, middle, newest]);
}

#[test]
fn a_claimed_waiter_whose_deadline_passed_while_staged_times_out_when_reparked() {
    let mut sim = Sim::new();
    let w = sim.await_("datastore", None, None, Some(1));
    sim.advance(500);
    sim.send("mneme", "datastore", "task", None);
    // The claim suspends the deadline: the waiter may still get this envelope.
    assert_eq!(sim.next_deadline_ms(), None);
    sim.advance(1_500);
    assert!(sim.drain().untouched(w));
    sim.commit_err();
    let d = sim.drain();
    assert_eq!(d.lines(w), [HubLine::Timeout]);
    assert_eq!(sim.parked("datastore"), 0);
}

#[test]
fn a_failed_commit_keeps_a_bounce_staged_for_the_next_commit() {
    let mut sim = Sim::new();
    sim.sent("mneme", "datastore", "task", None);
    let reader = sim.park("datastore");
    sim.drain();
    sim.committed(reader);
    sim.closed(reader, false);
    sim.commit_err();
    assert!(
        sim.hub.has_staged(),
        "no sender to tell, so the bounce must not be dropped"
    );
    assert!(sim.queued_ids("mneme").is_empty());
    sim.commit_ok();
    let queued: Vec<_> = sim.hub.router().queued("mneme").cloned().collect();
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].kind, "bounce");
}

// ===== one verb per connection (wire-compat "Known faults") =====

#[test]
fn a_sender_that_closes_before_the_commit_cancels_its_send() {
    let mut sim = Sim::new();
    let w = sim.park("datastore");
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    sim.closed(c, false);
    let d = sim.drain();
    assert_eq!(d.refused_ids(), [id.as_str()]);
    // Its claimed waiter is free again.
    assert_eq!(sim.parked("datastore"), 1);
    sim.commit_ok();
    let d = sim.drain();
    assert!(d.accepted_ids().is_empty());
    assert!(d.untouched(w));
    let next = sim.sent("mneme", "datastore", "task", None);
    assert_eq!(sim.drain().delivered_id(w), next);
}

#[test]
fn a_sender_that_reaches_eof_after_its_verb_still_gets_accepted() {
    let mut sim = Sim::new();
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    sim.eof(c);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.lines(c), [HubLine::Accepted { id: id.clone() }]);
    assert_eq!(sim.queued_ids("datastore"), [id]);
}

// ===== shutdown =====

#[test]
fn shutdown_closes_parked_awaits_without_consuming() {
    let mut sim = Sim::new();
    let queued = sim.sent("mneme", "datastore", "task", None);
    let parked = sim.await_("datastore", None, Some("result"), None);
    let greeting = sim.open();
    let now = sim.now();
    sim.hub.shutdown(now);
    sim.hub.stopped();
    let d = sim.drain();
    assert_eq!(
        d.error(parked),
        "hub is shutting down; nothing was consumed"
    );
    assert_eq!(d.error(greeting), "hub is shutting down");
    assert!(d.closed(parked) && d.closed(greeting));
    assert_eq!(d.audit.last(), Some(&AuditEvent::Shutdown { queued: 1 }));
    assert_eq!(sim.queued_ids("datastore"), [queued]);
    assert_eq!(sim.parked("datastore"), 0);
    let late = sim.open();
    assert_eq!(sim.drain().error(late), "hub is shutting down");
}

// ===== scale =====

#[test]
fn a_thousand_sends_then_a_thousand_awaits_come_out_in_fifo_order() {
    let mut sim = Sim::new();
    let mut ids = Vec::new();
    for _ in 0..1_000 {
        ids.push(sim.send("mneme", "datastore", "task", None).1);
    }
    // One commit settles every staged send, audited in staging order.
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.accepted_ids(), ids);
    sim.io_flush();
    let mut got = Vec::new();
    for _ in 0..1_000 {
        let c = sim.park("datastore");
        got.push(sim.drain().delivered_id(c));
        sim.io_flush();
    }
    assert_eq!(got, ids);
    assert_eq!(sim.hub.stats("datastore"), MailboxStats::default());
    assert_eq!(sim.hub.open_connections(), 0);
}

// ===== durable queues, acknowledged delivery, idempotent send, status (SPEC §12) =====

use crate::store::{StoredEnvelope, StoredId};

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
            [HubLine::Accepted { id: id.to_owned() }]
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

// ----- ack mode (SPEC §12.2) -----

#[test]
fn an_ack_mode_delivery_is_consumed_only_when_its_ack_is_committed() {
    let mut sim = Sim::durable_with_limits(|l| l.ack_timeout_ms = 5_000);
    let id = sim.sent("mneme", "datastore", "task", None);
    let seq = sim.drain().inserted_seq(&id);
    let r = sim.await_ack("datastore");
    let d = sim.drain();
    assert_eq!(d.delivered_id(r), id);
    assert!(!d.closed(r), "the connection stays open for the ack");
    assert!(
        d.store.is_empty(),
        "handing the envelope out changes nothing durable"
    );
    assert_eq!(
        sim.next_deadline_ms(),
        Some(5_000),
        "the ack deadline runs from the delivery"
    );
    sim.committed(r);
    let d = sim.drain();
    assert_eq!(
        d.audit,
        [AuditEvent::Delivered {
            conn: r,
            id: id.clone(),
            to: "datastore".into(),
            ack: true
        }]
    );
    assert_eq!(
        d.removes(),
        [] as [u64; 0],
        "the first byte does not consume in ack mode"
    );
    assert_eq!(
        d.states(),
        [] as [(String, String); 0],
        "no commit per ack-mode delivery"
    );
    assert_eq!(sim.status("mneme", &id).state, "delivered");

    sim.ack(r, &id);
    let d = sim.drain();
    assert!(d.untouched(r), "`acked` only after the commit");
    assert!(sim.hub.has_staged(), "an ack is staged like a send");
    assert_eq!(sim.next_deadline_ms(), None, "a staged ack has no deadline");
    let wall_ms = sim.wall.timestamp_millis();
    sim.hold_batches = true;
    sim.commit_point();
    let [batch] = &sim.batches[..] else {
        panic!("one batch: {:?}", sim.batches)
    };
    let ops = batch.store_ops.clone();
    let want_ops = [
        StoreOp::Remove { seq },
        StoreOp::State {
            seq,
            sender: "mneme".into(),
            id: id.clone(),
            state: "acked".into(),
            detail: None,
            at_ms: wall_ms,
        },
    ];
    assert_eq!(ops, want_ops);
    let staged = batch.audit.clone();
    assert_eq!(
        staged,
        [AuditEvent::Acked {
            conn: r,
            id: id.clone(),
            to: "datastore".into(),
            attempts: 0
        }]
    );

    sim.release_batches();
    let d = sim.drain();
    assert_eq!(d.lines(r), [HubLine::Acked { id: id.clone() }]);
    assert!(d.closed(r));
    assert_eq!(d.audit, staged);
    // Regression: the commit emitted the `acked` state once more as a pending operation,
    // costing every ack a second transaction.
    assert_eq!(d.store, want_ops, "nothing but the staged transaction");
    assert!(
        d.logs
            .iter()
            .any(|l| l.contains(&format!("conn={r} ")) && l.contains("outcome=acked")),
        "{:?}",
        d.logs
    );
    sim.closed(r, true);
    let d = sim.drain();
    assert!(d.audit.is_empty() && d.store.is_empty());
    assert!(sim.queued_ids("datastore").is_empty());
    assert!(!sim.hub.has_staged());
    assert_eq!(sim.hub.open_connections(), 0);
    assert_eq!(sim.status("datastore", &id).state, "acked");
}

#[test]
fn ack_false_and_absent_are_plain_awaits() {
    for ack in [Some(false), None] {
        let mut sim = Sim::new();
        let id = sim.sent("mneme", "datastore", "task", None);
        let c = sim.login("datastore");
        sim.line(c, &ack_await_text(None, None, None, ack));
        let d = sim.drain();
        assert_eq!(d.delivered_id(c), id);
        assert!(
            d.closed(c),
            "a plain delivery closes at once (ack = {ack:?})"
        );
    }
}

#[test]
fn an_ack_for_another_id_returns_the_envelope_to_the_next_await() {
    let mut sim = Sim::durable();
    let e1 = sim.sent("mneme", "datastore", "task", None);
    let e2 = sim.sent("mneme", "datastore", "task", None);
    let seq1 = sim.drain().inserted_seq(&e1);
    let r = sim.await_ack("datastore");
    assert_eq!(sim.drain().delivered_id(r), e1);
    sim.committed(r);
    sim.drain();
    sim.ack(r, &e2);
    sim.commit_ok();
    let d = sim.drain();
    let msg =
        format!("ack does not match the delivered envelope \"{e1}\"; it will be delivered again");
    assert_eq!(
        d.lines(r),
        [HubLine::Error {
            message: msg.clone()
        }]
    );
    assert!(d.closed(r));
    assert_eq!(d.requeued(), [(r, e1.clone(), msg, 1)]);
    assert!(
        d.store.contains(&StoreOp::Attempts {
            seq: seq1,
            attempts: 1
        }),
        "{:?}",
        d.store
    );
    assert_eq!(d.states(), [(e1.clone(), "queued".to_owned())]);
    assert!(
        !sim.hub.has_staged(),
        "nothing to commit: the wrong ack settles nothing"
    );
    assert_eq!(
        sim.queued_ids("datastore"),
        [e1.clone(), e2.clone()],
        "back at its place, ahead of e2"
    );
    sim.closed(r, false);
    assert!(
        sim.drain().requeued().is_empty(),
        "returned once, not again at the close"
    );
    let st = sim.status("mneme", &e1);
    assert_eq!(
        (st.state.as_str(), st.position, st.attempts),
        ("queued", Some(1), Some(1))
    );

    assert_eq!(sim.acked("datastore"), e1);
    let d = sim.drain();
    assert!(
        d.audit
            .iter()
            .any(|e| matches!(e, AuditEvent::Acked { id, attempts: 1, .. } if *id == e1)),
        "{:?}",
        d.audit
    );
    assert_eq!(sim.queued_ids("datastore"), [e2]);
}

#[test]
fn any_line_but_the_ack_returns_the_envelope_with_its_attempt_counted() {
    // More cases than the default cap on deliveries: none of them may give the envelope up.
    let mut sim = Sim::with_limits(|l| l.max_deliveries = 100);
    let e1 = sim.sent("mneme", "datastore", "task", None);
    let e2 = sim.sent("mneme", "datastore", "task", None);
    let again = "; the envelope will be delivered again";
    let cases: Vec<(Vec<u8>, String)> = vec![
        (
            br#"{"await":{}}"#.to_vec(),
            format!("expected an ack, got await{again}"),
        ),
        (
            hello_text("datastore", "tok-datastore").into_bytes(),
            format!("expected an ack, got hello{again}"),
        ),
        (
            status_text(&e1).into_bytes(),
            format!("expected an ack, got status{again}"),
        ),
        (
            send_text(&e1, "datastore", "task", None, "{}").into_bytes(),
            format!("expected an ack, got send{again}"),
        ),
        (
            b"ack".to_vec(),
            format!("malformed line: expected value{again}"),
        ),
        // A blank line is a malformed line like any other (SPEC §2.1).
        (
            b"".to_vec(),
            format!("malformed line: EOF while parsing a value{again}"),
        ),
        (
            br#"{"ack":{"id":""}}"#.to_vec(),
            format!("invalid ack: id must not be empty{again}"),
        ),
        (
            br#"{"ack":{}}"#.to_vec(),
            format!("malformed line: missing field `id`{again}"),
        ),
        (
            format!(r#"{{"ack":{{"id":"{e1}","extra":1}}}}"#).into_bytes(),
            format!("malformed line: unknown field in `ack`, expected `id`{again}"),
        ),
        (
            format!(r#"{{"ack":["{e1}"]}}"#).into_bytes(),
            format!("malformed line: invalid type: sequence, expected an object{again}"),
        ),
        (
            b"{\"ack\":{\"id\":\"\xff\"}}".to_vec(),
            format!("line is not valid UTF-8{again}"),
        ),
    ];
    for (attempt, (line, want)) in cases.into_iter().enumerate() {
        let r = sim.await_ack("datastore");
        assert_eq!(sim.drain().delivered_id(r), e1, "attempt {attempt}");
        sim.committed(r);
        sim.drain();
        sim.raw_line(r, &line);
        let d = sim.drain();
        assert_eq!(
            d.lines(r),
            [HubLine::Error {
                message: want.clone()
            }]
        );
        assert!(d.closed(r));
        assert_eq!(d.requeued(), [(r, e1.clone(), want, attempt as u32 + 1)]);
        assert_eq!(sim.queued_ids("datastore"), [e1.clone(), e2.clone()]);
        sim.io_flush();
        assert!(sim.drain().requeued().is_empty());
    }
}

#[test]
fn an_overlong_line_instead_of_the_ack_returns_the_envelope() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let r = sim.await_ack("datastore");
    sim.drain();
    sim.committed(r);
    let now = sim.now();
    sim.hub
        .handle_bad_input(r, "line exceeds the limit of 1048576 bytes", now);
    let d = sim.drain();
    assert_eq!(d.error(r), "line exceeds the limit of 1048576 bytes");
    assert_eq!(
        d.requeued(),
        [(
            r,
            id.clone(),
            "line exceeds the limit of 1048576 bytes".to_owned(),
            1
        )]
    );
    assert_eq!(sim.queued_ids("datastore"), [id]);
}

#[test]
fn eof_before_the_ack_returns_the_envelope() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let r = sim.await_ack("datastore");
    sim.drain();
    sim.committed(r);
    sim.eof(r);
    let d = sim.drain();
    assert_eq!(
        d.lines(r),
        [HubLine::Error {
            message: "reader closed without acking".into()
        }]
    );
    assert!(d.closed(r));
    assert_eq!(
        d.requeued(),
        [(r, id.clone(), "reader closed without acking".to_owned(), 1)]
    );
    sim.io_flush();
    let next = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(next), id);
}

#[test]
fn a_close_before_the_ack_returns_the_envelope_to_a_waiting_reader() {
    // Fully written (the kernel took every byte) or cut short: without an ack, neither
    // consumes, and neither is a loss to bounce.
    for flushed in [true, false] {
        let mut sim = Sim::durable();
        let id = sim.sent("mneme", "datastore", "task", None);
        sim.drain();
        let r = sim.await_ack("datastore");
        let other = sim.park("datastore");
        assert_eq!(sim.drain().delivered_id(r), id);
        sim.committed(r);
        sim.closed(r, flushed);
        let d = sim.drain();
        assert!(
            d.untouched(r),
            "the socket is gone: nothing is written to it"
        );
        let reason = if flushed { "closed" } else { "peer reset" };
        assert_eq!(d.requeued(), [(r, id.clone(), reason.to_owned(), 1)]);
        assert!(
            !d.audit.iter().any(|e| matches!(e, AuditEvent::Lost { .. })),
            "no loss in ack mode"
        );
        assert!(!sim.hub.has_staged(), "no bounce");
        assert_eq!(d.removes(), [] as [u64; 0]);
        assert_eq!(
            d.delivered_id(other),
            id,
            "straight to the next matching waiter"
        );
    }
}

#[test]
fn the_ack_deadline_returns_the_envelope_exactly_at_the_limit() {
    let mut sim = Sim::with_limits(|l| l.ack_timeout_ms = 5_000);
    let id = sim.sent("mneme", "datastore", "task", None);
    sim.advance(300);
    let r = sim.await_ack("datastore");
    sim.drain();
    assert_eq!(sim.next_deadline_ms(), Some(5_300));
    sim.committed(r);
    sim.advance(4_999);
    let d = sim.drain();
    assert!(d.untouched(r), "not one millisecond early");
    assert!(d.requeued().is_empty());
    assert!(sim.queued_ids("datastore").is_empty());
    sim.advance(1);
    let d = sim.drain();
    let msg = "no ack within 5000 ms; the envelope will be delivered again";
    assert_eq!(
        d.lines(r),
        [HubLine::Error {
            message: msg.into()
        }]
    );
    assert!(d.closed(r));
    assert_eq!(d.requeued(), [(r, id.clone(), msg.to_owned(), 1)]);
    assert_eq!(sim.queued_ids("datastore"), [id]);
    assert_eq!(sim.next_deadline_ms(), None);
}

#[test]
fn an_ack_read_before_its_connection_closed_still_settles() {
    let mut sim = Sim::durable();
    let id = sim.sent("mneme", "datastore", "task", None);
    sim.drain();
    let r = sim.await_ack("datastore");
    sim.drain();
    sim.committed(r);
    sim.ack(r, &id);
    sim.closed(r, false); // the reader is gone before the commit
    let d = sim.drain();
    assert!(d.requeued().is_empty(), "an ack already read stands");
    sim.commit_ok();
    let d = sim.drain();
    assert!(d.untouched(r), "nobody to answer");
    assert_eq!(
        d.audit,
        [AuditEvent::Acked {
            conn: r,
            id: id.clone(),
            to: "datastore".into(),
            attempts: 0
        }]
    );
    assert_eq!(d.removes().len(), 1);
    assert!(sim.queued_ids("datastore").is_empty());
    assert_eq!(sim.status("mneme", &id).state, "acked");
}

#[test]
fn an_ack_whose_commit_fails_is_refused_and_the_envelope_requeued() {
    let mut sim = Sim::durable();
    let id = sim.sent("mneme", "datastore", "task", None);
    let seq = sim.drain().inserted_seq(&id);
    let r = sim.await_ack("datastore");
    sim.drain();
    sim.committed(r);
    sim.ack(r, &id);
    sim.drain();
    sim.commit_err();
    sim.commit_ok();
    let d = sim.drain();
    let msg = "ack not recorded: the audit log could not be written (disk full); the envelope will be delivered again";
    assert_eq!(
        d.lines(r),
        [HubLine::Error {
            message: msg.into()
        }]
    );
    assert!(d.closed(r));
    assert!(!d
        .audit
        .iter()
        .any(|e| matches!(e, AuditEvent::Acked { .. })));
    // The reader did ack: the store failed, so the return is no attempt (SPEC §12.2).
    assert_eq!(d.requeued(), [(r, id.clone(), msg.to_owned(), 0)]);
    assert_eq!(
        d.store,
        [StoreOp::State {
            seq,
            sender: "mneme".into(),
            id: id.clone(),
            state: "queued".into(),
            detail: None,
            at_ms: sim.wall.timestamp_millis()
        },]
    );
    assert_eq!(sim.queued_ids("datastore"), std::slice::from_ref(&id));
    sim.closed(r, true);
    let d = sim.drain();
    // Regression: the connection stayed AckStaged, so its close was logged as acked.
    assert!(
        !d.logs.iter().any(|l| l.contains("outcome=acked")),
        "{:?}",
        d.logs
    );
    assert_eq!(sim.acked("datastore"), id);
}

#[test]
fn an_ack_of_a_closed_connection_whose_commit_fails_is_requeued_silently() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let r = sim.await_ack("datastore");
    sim.drain();
    sim.committed(r);
    sim.ack(r, &id);
    sim.closed(r, true);
    sim.commit_err();
    let d = sim.drain();
    assert!(d.untouched(r));
    assert_eq!(d.requeued().len(), 1);
    assert_eq!(sim.queued_ids("datastore"), [id]);
}

#[test]
fn an_ack_outside_an_ack_mode_delivery_is_refused() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let verb = sim.login("datastore");
    sim.line(verb, &ack_text(&id));
    let first = sim.open();
    sim.line(first, &ack_text(&id));
    let status_first = sim.open();
    sim.line(status_first, &status_text(&id));
    let d = sim.drain();
    assert_eq!(d.error(verb), "an ack outside an acknowledged delivery");
    assert_eq!(d.error(first), "expected hello as the first line, got ack");
    assert_eq!(
        d.error(status_first),
        "expected hello as the first line, got status"
    );
    // After a plain delivery an ack is a line after the verb: it gets that error, and the
    // envelope stays consumed.
    let plain = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(plain), id);
    sim.ack(plain, &id);
    let d = sim.drain();
    assert_eq!(d.error(plain), crate::hub::pipeline::LINE_AFTER_THE_VERB);
    assert!(d.requeued().is_empty());
    assert_eq!(sim.queued_ids("datastore"), [] as [String; 0]);
}

#[test]
fn an_ack_mode_waiter_parked_before_the_send_gets_ack_mode() {
    let mut sim = Sim::new();
    let r = sim.await_ack("datastore");
    let id = sim.sent("mneme", "datastore", "task", None);
    let d = sim.drain();
    assert_eq!(d.delivered_id(r), id);
    assert!(!d.closed(r), "ack mode survives the claim");
    sim.committed(r);
    sim.closed(r, true);
    assert_eq!(sim.drain().requeued().len(), 1);
    // A returned envelope routed to a parked ack-mode waiter is delivered in ack mode too.
    let r2 = sim.await_ack("datastore");
    let d = sim.drain();
    assert_eq!(d.delivered_id(r2), id);
    assert!(!d.closed(r2));
}

// ----- durable store operations (SPEC §12.1) -----

#[test]
fn a_plain_delivery_on_a_durable_hub_is_removed_at_its_first_byte() {
    let mut sim = Sim::durable();
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.lines(c), [HubLine::Accepted { id: id.clone() }]);
    let seq = d.inserted_seq(&id);
    assert!(
        matches!(&d.store[..], [StoreOp::Insert { id: i, agent, .. }] if *i == id && agent == "datastore"),
        "{:?}",
        d.store
    );
    sim.closed(c, true);

    // Zero bytes: no Remove, and no attempt: the delivery never reached its reader.
    let lost_nothing = sim.park("datastore");
    sim.drain();
    sim.closed(lost_nothing, false);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.removes(), [] as [u64; 0]);
    assert!(
        !d.store
            .iter()
            .any(|op| matches!(op, StoreOp::Attempts { .. })),
        "{:?}",
        d.store
    );

    let r = sim.park("datastore");
    let d = sim.drain();
    assert_eq!(d.delivered_id(r), id);
    assert!(d.store.is_empty(), "nothing durable before the first byte");
    sim.committed(r);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.removes(), [seq]);
    assert_eq!(d.states(), [(id, "delivered".to_owned())]);
}

#[test]
fn a_memory_hub_emits_no_store_operations() {
    let mut sim = Sim::new();
    let id = sim.sent("mneme", "datastore", "task", None);
    let r = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(r), id);
    sim.io_flush();
    let d = sim.drain();
    assert!(d.store.is_empty());
    assert_eq!(
        sim.status("mneme", &id).state,
        "delivered",
        "status works without a store"
    );
}

// ----- idempotent send (SPEC §12.3) -----

#[test]
fn a_resend_with_the_same_id_and_content_is_accepted_again_and_queued_once() {
    let mut sim = Sim::durable();
    sim.sent_id("mneme", "x1", "datastore");
    sim.drain();
    // The client restamps ts when it retries; ts is not part of the comparison.
    let c = sim.login("mneme");
    sim.line(
        c,
        &send_text("x1", "datastore", "task", None, "{}")
            .replace("2026-07-21T06:40:51Z", "2026-07-21T07:00:00+01:00"),
    );
    let d = sim.drain();
    assert_eq!(
        d.lines(c),
        [HubLine::Accepted { id: "x1".into() }],
        "answered at once: the first copy is durable"
    );
    assert!(d.closed(c));
    assert!(!sim.hub.has_staged());
    assert_eq!(
        d.events(),
        [&AuditEvent::Duplicate {
            conn: c,
            id: "x1".into()
        }]
    );
    assert!(d.accepted_ids().is_empty());
    assert!(d.store.is_empty(), "nothing to persist");
    assert_eq!(sim.queued_ids("datastore"), ["x1"]);
    assert!(d.logs.iter().any(|l| l.contains("outcome=duplicate")));
    // Still a duplicate once the first copy was delivered and consumed.
    let r = sim.park("datastore");
    sim.drain();
    sim.io_flush();
    sim.drain();
    let c = sim.send_id("mneme", "x1", "datastore", "task", None, "{}");
    let d = sim.drain();
    assert_eq!(d.lines(c), [HubLine::Accepted { id: "x1".into() }]);
    assert!(d.deliveries.is_empty() && sim.queued_ids("datastore").is_empty());
    assert!(d.untouched(r));
}

#[test]
fn the_same_id_with_other_content_is_refused() {
    let mut sim = Sim::new();
    let c = sim.send_id("mneme", "x1", "datastore", "task", Some("c0"), r#"{"a":1}"#);
    sim.commit_ok();
    sim.drain();
    sim.closed(c, true);
    let want = "id \"x1\" was already accepted from you with another destination, kind, correlationId or body; use a new id";
    let variants: [(&str, &str, Option<&str>, &str); 6] = [
        ("scribe", "task", Some("c0"), r#"{"a":1}"#),
        ("datastore", "result", Some("c0"), r#"{"a":1}"#),
        ("datastore", "task", Some("c1"), r#"{"a":1}"#),
        ("datastore", "task", None, r#"{"a":1}"#),
        ("datastore", "task", Some("c0"), r#"{"a":2}"#),
        // The body is compared as text: the same JSON value spelt differently is another body.
        ("datastore", "task", Some("c0"), r#"{"a":1.0}"#),
    ];
    for (to, kind, corr, body) in variants {
        let c = sim.send_id("mneme", "x1", to, kind, corr, body);
        let d = sim.drain();
        assert_eq!(
            d.error(c),
            want,
            "to={to} kind={kind} corr={corr:?} body={body}"
        );
        assert!(d.closed(c));
        assert!(!sim.hub.has_staged());
    }
    assert_eq!(sim.queued_ids("datastore"), ["x1"]);
    assert!(sim.queued_ids("scribe").is_empty());
}

#[test]
fn ids_are_remembered_per_sender() {
    let mut sim = Sim::new();
    sim.sent_id("mneme", "x1", "datastore");
    sim.sent_id("scribe", "x1", "datastore");
    let d = sim.drain();
    assert_eq!(d.accepted_ids(), ["x1", "x1"]);
    let queued: Vec<(String, String)> = sim
        .hub
        .router()
        .queued("datastore")
        .map(|q| (q.from.clone(), q.id.clone()))
        .collect();
    assert_eq!(
        queued,
        [
            ("mneme".to_owned(), "x1".to_owned()),
            ("scribe".to_owned(), "x1".to_owned())
        ]
    );
    assert_eq!(sim.status("mneme", "x1").from.as_deref(), Some("mneme"));
    assert_eq!(sim.status("scribe", "x1").from.as_deref(), Some("scribe"));
}

#[test]
fn a_resend_while_the_first_copy_is_staged_is_refused() {
    let mut sim = Sim::new();
    let first = sim.send_id("mneme", "x1", "datastore", "task", None, "{}");
    let second = sim.send_id("mneme", "x1", "datastore", "task", None, "{}");
    let other_sender = sim.send_id("scribe", "x1", "datastore", "task", None, "{}");
    let d = sim.drain();
    assert_eq!(
        d.error(second),
        "a send with id \"x1\" is being accepted on another connection; retry"
    );
    assert!(d.closed(second));
    assert!(
        d.untouched(other_sender),
        "another sender's x1 is another envelope"
    );
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.lines(first), [HubLine::Accepted { id: "x1".into() }]);
    assert_eq!(
        d.lines(other_sender),
        [HubLine::Accepted { id: "x1".into() }]
    );
    assert_eq!(sim.queued_ids("datastore"), ["x1", "x1"]);
    // Once the first is accepted, the retry the error asked for is a duplicate.
    let retry = sim.send_id("mneme", "x1", "datastore", "task", None, "{}");
    assert_eq!(
        sim.drain().lines(retry),
        [HubLine::Accepted { id: "x1".into() }]
    );
    assert_eq!(sim.queued_ids("datastore").len(), 2);
}

#[test]
fn a_send_that_was_not_accepted_does_not_poison_its_id() {
    let mut sim = Sim::new();
    // Cancelled: the sender went away before the commit.
    let c = sim.send_id("mneme", "x1", "datastore", "task", None, "{}");
    sim.closed(c, false);
    // Refused: the commit failed.
    let c2 = sim.send_id("mneme", "x2", "datastore", "task", None, "{}");
    sim.commit_err();
    assert!(sim.drain().error(c2).starts_with("envelope not accepted"));
    // Refused: its sender went away before the commit.
    let c3 = sim.send_id("mneme", "x3", "datastore", "task", None, "{}");
    sim.closed(c3, false);
    sim.drain();
    for id in ["x1", "x2", "x3"] {
        let c = sim.send_id("mneme", id, "datastore", "task", None, r#"{"retry":true}"#);
        assert!(
            sim.hub.has_staged(),
            "{id}: a new envelope, staged like any other"
        );
        sim.commit_ok();
        let d = sim.drain();
        assert_eq!(d.lines(c), [HubLine::Accepted { id: id.into() }]);
        assert_eq!(d.accepted_ids(), [id]);
    }
    assert_eq!(sim.queued_ids("datastore"), ["x1", "x2", "x3"]);
}

// ----- status (SPEC §12.4) -----

#[test]
fn status_tells_sender_and_recipient_where_an_envelope_is() {
    let mut sim = Sim::new();
    let e1 = sim.sent("mneme", "datastore", "task", None);
    let other = sim.sent("scribe", "datastore", "task", None);
    sim.advance(1_500);
    let e2 = sim.sent("mneme", "datastore", "result", None);
    sim.drain();
    let queued = EnvelopeStatus {
        id: e2.clone(),
        state: "queued".into(),
        from: Some("mneme".into()),
        to: Some("datastore".into()),
        position: Some(3),
        at: at(1_500),
        attempts: None,
        reason: None,
    };
    assert_eq!(sim.status("mneme", &e2), queued, "the sender");
    assert_eq!(sim.status("datastore", &e2), queued, "the recipient");
    let unknown = EnvelopeStatus {
        id: e2.clone(),
        state: "unknown".into(),
        ..EnvelopeStatus::default()
    };
    assert_eq!(
        sim.status("scribe", &e2),
        unknown,
        "neither: as if it did not exist"
    );
    assert_eq!(sim.status("mneme", "no-such-id").state, "unknown");
    assert_eq!(sim.status("scribe", &other).position, Some(2));

    // A filtered await takes e2 from the back: the others keep their positions.
    sim.advance(500);
    let r = sim.await_("datastore", None, Some("result"), None);
    sim.drain();
    sim.io_flush();
    sim.drain();
    let delivered = sim.status("mneme", &e2);
    assert_eq!(
        (delivered.state.as_str(), delivered.position, delivered.at),
        ("delivered", None, at(2_000))
    );
    assert_eq!(delivered.to.as_deref(), Some("datastore"));
    assert_eq!(sim.status("mneme", &e1).position, Some(1));
    assert_eq!(sim.status("scribe", &other).position, Some(2));
    let r2 = sim.park("datastore");
    sim.drain();
    sim.io_flush();
    assert_eq!(
        sim.status("scribe", &other).position,
        Some(1),
        "position follows the queue"
    );
    assert!(r != r2);
}

#[test]
fn status_follows_an_ack_mode_delivery_and_a_bounce() {
    let mut sim = Sim::new();
    let acked = sim.sent("mneme", "datastore", "task", None);
    let r = sim.await_ack("datastore");
    sim.drain();
    assert_eq!(
        sim.status("mneme", &acked).position,
        None,
        "in flight: taken from the queue"
    );
    sim.committed(r);
    assert_eq!(sim.status("datastore", &acked).state, "delivered");
    sim.ack(r, &acked);
    assert_eq!(
        sim.status("datastore", &acked).state,
        "delivered",
        "until the ack is committed"
    );
    sim.commit_ok();
    sim.drain();
    assert_eq!(sim.status("datastore", &acked).state, "acked");
    assert_eq!(sim.status("mneme", &acked).state, "acked");

    let lost = sim.sent("mneme", "datastore", "task", None);
    let r = sim.park("datastore");
    sim.drain();
    sim.committed(r);
    sim.closed(r, false);
    sim.commit_ok(); // the bounce
    let d = sim.drain();
    let st = sim.status("mneme", &lost);
    assert_eq!(
        (st.state.as_str(), st.to.as_deref()),
        ("bounced", Some("datastore"))
    );
    assert_eq!(sim.status("datastore", &lost).state, "bounced");
    // The bounce itself is an envelope from the hub to mneme, and mneme may ask about it.
    let bounce_id = d.accepted_ids().pop().expect("the bounce was accepted");
    let st = sim.status("mneme", &bounce_id);
    assert_eq!(
        (st.state.as_str(), st.from.as_deref(), st.position),
        ("queued", Some("hub"), Some(1))
    );
    assert_eq!(sim.status("datastore", &bounce_id).state, "unknown");
}

// ----- restart (SPEC §12.1) -----

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
        text: env.to_json(),
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
    }
}

#[test]
fn restore_brings_back_queues_in_acceptance_order_and_the_ledger() {
    let mut sim = Sim::durable();
    let t0 = sim.wall.timestamp_millis() - 60_000;
    let loaded = Loaded {
        envelopes: vec![
            stored(3, "datastore", "a", "mneme", 0),
            stored(5, "scribe", "s", "mneme", 0),
            // Delivered in ack mode before the restart and never acked: still in the store.
            stored(7, "datastore", "b", "scribe", 2),
            stored(9, "datastore", "c", "mneme", 0),
        ],
        ids: vec![
            remembered(3, "mneme", "a", "datastore", "queued", t0),
            remembered(5, "mneme", "s", "scribe", "queued", t0),
            remembered(7, "scribe", "b", "datastore", "delivered", t0),
            remembered(9, "mneme", "c", "datastore", "queued", t0),
            // Settled after the queued ones were accepted: its place in acceptance order
            // is taken too, though no queue holds it.
            remembered(12, "mneme", "done", "datastore", "acked", t0),
            remembered(2, "mneme", "odd", "datastore", "no-such-state", t0),
        ],
    };
    let now = sim.now();
    sim.hub.restore(loaded, now);
    assert_eq!(sim.queued_ids("datastore"), ["a", "b", "c"]);
    assert_eq!(sim.queued_ids("scribe"), ["s"]);
    assert!(sim.drain().store.is_empty(), "restoring writes nothing");

    // Status after the restart: the unacked one is queued again, attempts kept.
    let st = sim.status("datastore", "b");
    assert_eq!(
        (
            st.state.as_str(),
            st.from.as_deref(),
            st.position,
            st.attempts
        ),
        ("queued", Some("scribe"), Some(2), Some(2))
    );
    assert_eq!(sim.status("mneme", "done").state, "acked");
    assert_eq!(
        sim.status("mneme", "odd").state,
        "unknown",
        "a record in an unknown state is skipped"
    );

    // Resends of remembered ids are duplicates, settled or queued.
    for id in ["a", "done"] {
        let c = sim.send_id("mneme", id, "datastore", "task", None, "{}");
        let d = sim.drain();
        assert_eq!(d.lines(c), [HubLine::Accepted { id: id.into() }]);
        assert_eq!(
            d.events(),
            [&AuditEvent::Duplicate {
                conn: c,
                id: id.into()
            }]
        );
    }
    let c = sim.send_id("mneme", "a", "datastore", "task", None, r#"{"other":1}"#);
    assert!(sim
        .drain()
        .error(c)
        .starts_with("id \"a\" was already accepted from you"));

    // New envelopes continue after the highest restored seq (queued or only remembered),
    // behind the restored ones.
    let (_, fresh) = sim.send("mneme", "datastore", "task", None);
    sim.commit_ok();
    assert_eq!(sim.drain().inserted_seq(&fresh), 13);
    assert_eq!(sim.queued_ids("datastore"), ["a", "b", "c", fresh.as_str()]);
    let r = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(r), "a");
    sim.committed(r);
    sim.commit_ok();
    assert_eq!(sim.drain().removes(), [3]);
}

#[test]
fn a_restored_queue_is_delivered_in_order_to_a_waiter_that_parks_after_the_restart() {
    let mut sim = Sim::new();
    let now = sim.now();
    sim.hub.restore(
        Loaded {
            envelopes: vec![
                stored(1, "datastore", "a", "mneme", 0),
                stored(2, "datastore", "b", "mneme", 0),
            ],
            ids: vec![],
        },
        now,
    );
    let mut got = Vec::new();
    for _ in 0..2 {
        let r = sim.park("datastore");
        got.push(sim.drain().delivered_id(r));
        sim.io_flush();
    }
    assert_eq!(got, ["a", "b"]);
    assert_eq!(
        sim.status("mneme", "a").state,
        "unknown",
        "no remembered id: nothing to report"
    );
}

// ----- ledger purge (SPEC §12.3) -----

#[test]
fn settled_ids_are_forgotten_after_the_window_and_queued_ones_kept() {
    let mut sim = Sim::durable_with_limits(|l| l.idempotency_window_secs = 60);
    let now = sim.now();
    sim.hub.start_purging(now);
    assert_eq!(
        sim.next_deadline_ms(),
        Some(10_000),
        "the purge is a deadline like any other"
    );
    let settled = sim.sent("mneme", "datastore", "task", None);
    let queued_for_long = sim.sent("mneme", "datastore", "task", None);
    let r = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(r), settled);
    sim.io_flush();
    sim.commit_ok();
    sim.drain();

    // Within the window: nothing is forgotten.
    for _ in 0..5 {
        sim.advance(10_000);
    }
    sim.commit_ok();
    assert!(sim.drain().store.is_empty());
    assert_eq!(sim.status("mneme", &settled).state, "delivered");
    // At it (settled a whole window ago): the settled id goes, in memory and on disk; the
    // queued one stays.
    sim.advance(10_000);
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(
        d.store,
        [StoreOp::Forget {
            seq: 0,
            sender: "mneme".into(),
            id: settled.clone()
        }],
        "the first accepted envelope (seq 0) is the settled one"
    );
    assert_eq!(sim.status("mneme", &settled).state, "unknown");
    let st = sim.status("mneme", &queued_for_long);
    assert_eq!((st.state.as_str(), st.position), ("queued", Some(1)));
    let dup = sim.send_id("mneme", &queued_for_long, "datastore", "task", None, "{}");
    assert_eq!(
        sim.drain().events(),
        [&AuditEvent::Duplicate {
            conn: dup,
            id: queued_for_long.clone()
        }]
    );
    // A forgotten id is new again: a resend now is a second copy (the window's trade-off).
    let again = sim.send_id("mneme", &settled, "datastore", "task", None, "{}");
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(
        d.lines(again),
        [HubLine::Accepted {
            id: settled.clone()
        }]
    );
    assert_eq!(d.accepted_ids(), std::slice::from_ref(&settled));

    // The window runs from settlement: the envelope queued for a whole window is kept for
    // another whole window after its delivery.
    let r = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(r), queued_for_long);
    sim.io_flush();
    sim.commit_ok();
    assert_eq!(sim.drain().removes().len(), 1);
    sim.advance(10_000);
    sim.commit_ok();
    assert!(sim.drain().store.is_empty(), "settled 10 s ago");
    assert_eq!(sim.status("mneme", &queued_for_long).state, "delivered");
    for _ in 0..5 {
        sim.advance(10_000);
    }
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(
        d.store,
        [StoreOp::Forget {
            seq: 1,
            sender: "mneme".into(),
            id: queued_for_long.clone()
        }]
    );
}

#[test]
fn past_max_ids_the_earliest_settled_ids_go_first() {
    let mut sim = Sim::with_limits(|l| l.idempotency_max_ids = 2);
    let now = sim.now();
    sim.hub.start_purging(now);
    let ids: Vec<String> = (0..4)
        .map(|_| sim.sent("mneme", "datastore", "task", None))
        .collect();
    for _ in 0..3 {
        sim.advance(1);
        let r = sim.park("datastore");
        sim.drain();
        sim.io_flush();
        assert!(r > 0);
    }
    sim.advance(10_000);
    let known: Vec<String> = ids.iter().map(|id| sim.status("mneme", id).state).collect();
    // Four remembered, two allowed: the two delivered first go; the queued one never does.
    assert_eq!(known, ["unknown", "unknown", "delivered", "queued"]);
}

#[test]
fn queue_caps_neither_block_a_duplicate_nor_poison_a_refused_id() {
    let mut sim = Sim::with_limits(|l| l.queue_max_envelopes = 1);
    sim.sent_id("mneme", "x0", "datastore");
    // The queue is full, but a resend of x0 adds nothing to it: answered accepted.
    let dup = sim.send_id("mneme", "x0", "datastore", "task", None, "{}");
    assert_eq!(
        sim.drain().lines(dup),
        [HubLine::Accepted { id: "x0".into() }]
    );
    // x1 is refused by the cap, and so is not remembered.
    let full = sim.send_id("mneme", "x1", "datastore", "task", None, "{}");
    assert!(sim.drain().error(full).contains("is full"));
    assert_eq!(sim.status("mneme", "x1").state, "unknown");
    let r = sim.park("datastore");
    assert_eq!(sim.drain().delivered_id(r), "x0");
    sim.io_flush();
    sim.sent_id("mneme", "x1", "datastore");
    assert_eq!(sim.drain().accepted_ids(), ["x1"]);
}

// ----- presence (SPEC §14) -----

/// Runs `who` as `asker` and returns the hub's answer.
fn who(sim: &mut Sim, asker: &str) -> crate::wire::Presence {
    let c = sim.login(asker);
    sim.line(c, r#"{"who":{}}"#);
    let d = sim.drain();
    match d.lines(c).last() {
        Some(HubLine::Who(p)) => p.clone(),
        other => panic!("expected a who line, got {other:?}"),
    }
}

#[test]
fn who_lists_every_roster_name_with_parked_filters_queue_and_times() {
    let mut sim = Sim::new();
    assert!(who(&mut sim, "mneme")
        .agents
        .iter()
        .all(|a| a.last_delivery.is_none() && a.parked.is_empty()));
    let _filtered = sim.await_("datastore", Some("x1"), Some("result"), None);
    let _any = sim.await_("datastore", None, None, None);
    sim.sent("mneme", "scribe", "task", None);
    sim.sent("mneme", "scribe", "task", None);
    let p = who(&mut sim, "scribe");
    let names: Vec<&str> = p.agents.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(
        names,
        ["datastore", "mneme", "scribe"],
        "every roster name, sorted"
    );
    let ds = &p.agents[0];
    assert_eq!(ds.parked.len(), 2);
    assert_eq!(
        (
            ds.parked[0].reply_to.as_deref(),
            ds.parked[0].kind.as_deref()
        ),
        (Some("x1"), Some("result"))
    );
    assert_eq!(
        (
            ds.parked[1].reply_to.as_deref(),
            ds.parked[1].kind.as_deref()
        ),
        (None, None),
        "oldest first"
    );
    assert_eq!(p.agents[2].queued, 2);
    assert!(p.agents[1].last_seen.is_some(), "mneme authenticated");
    // A delivery to datastore's unfiltered await sets its last delivery.
    sim.sent("mneme", "datastore", "task", None);
    sim.io_flush();
    let p = who(&mut sim, "mneme");
    assert!(p.agents[0].last_delivery.is_some());
    assert_eq!(p.agents[0].parked.len(), 1);
    let text = serde_json::to_string(&p).unwrap();
    assert!(!text.contains("tok-"), "no token in a who answer: {text}");
}

// ----- replies held for the store's flush (SPEC §12.1, sync = "full") -----

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
        self.hub.handle_synced(batch, result, now);
    }
}

#[test]
fn accepted_waits_for_the_flush_but_the_waiting_reader_does_not() {
    let mut sim = Sim::durable();
    let r = sim.park("datastore");
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    sim.commit_unflushed(1);
    let d = sim.drain();
    assert!(
        d.untouched(c),
        "no `accepted` before the flush: {:?}",
        d.lines(c)
    );
    assert_eq!(
        d.delivered_id(r),
        id,
        "the commit is written (it survives a hub crash): the parked reader has it at once"
    );
    assert_eq!(sim.hub.held_replies(), 1);
    // A flush of an earlier batch releases nothing.
    sim.flushed(0, Ok(()));
    assert!(sim.drain().untouched(c));
    sim.flushed(1, Ok(()));
    let d = sim.drain();
    assert_eq!(d.lines(c), [HubLine::Accepted { id }]);
    assert!(d.closed(c));
    assert_eq!(sim.hub.held_replies(), 0);
}

#[test]
fn one_flush_releases_every_batch_up_to_it_in_commit_order() {
    let mut sim = Sim::durable();
    // Handoffs to parked readers: those commit at once even while a flush runs (SPEC §12.1),
    // so three batches can wait for flushes at the same time.
    for _ in 0..3 {
        sim.park("datastore");
    }
    let (a, ida) = sim.send("mneme", "datastore", "task", None);
    sim.commit_unflushed(1);
    let (b, idb) = sim.send("scribe", "datastore", "task", None);
    sim.commit_unflushed(2);
    let (c, _) = sim.send("mneme", "datastore", "task", None);
    sim.commit_unflushed(3);
    sim.drain();
    sim.flushed(2, Ok(()));
    let d = sim.drain();
    assert_eq!(d.lines(a), [HubLine::Accepted { id: ida }]);
    assert_eq!(d.lines(b), [HubLine::Accepted { id: idb }]);
    assert!(d.untouched(c), "batch 3 waits for its own flush");
    assert_eq!(sim.hub.held_replies(), 1);
}

#[test]
fn a_failed_flush_answers_an_error_that_says_what_happened() {
    let mut sim = Sim::durable();
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    sim.commit_unflushed(1);
    sim.drain();
    sim.flushed(1, Err("Input/output error (os error 5)".into()));
    let d = sim.drain();
    let msg = d.error(c);
    assert!(
        msg.contains(&format!("envelope {id:?} was queued")),
        "{msg}"
    );
    assert!(
        msg.contains("os error 5") && msg.contains("same id"),
        "{msg}"
    );
    // The envelope is in the queue all the same (the commit was written).
    assert_eq!(sim.queued_ids("datastore"), std::slice::from_ref(&id));
    // A resend cannot be confirmed either: its first copy may never reach the disk.
    let again = sim.send_id("mneme", &id, "datastore", "task", None, "{}");
    let d = sim.drain();
    assert_eq!(
        d.error(again),
        "envelope not accepted: an earlier flush of the queue store to disk failed (Input/output error (os error 5)); sends are refused until the hub is restarted"
    );
    assert!(!sim.hub.has_staged());
}

#[test]
fn an_ack_is_confirmed_only_after_its_flush() {
    let mut sim = Sim::durable();
    let id = sim.sent("mneme", "datastore", "task", None);
    let r = sim.await_ack("datastore");
    assert_eq!(sim.drain().delivered_id(r), id);
    sim.committed(r);
    sim.ack(r, &id);
    sim.commit_unflushed(4);
    let d = sim.drain();
    assert!(d.untouched(r), "no `acked` before the flush");
    // A line the reader sends meanwhile waits: the ack stands, and that line is answered
    // after `acked` as a line after the verb (SPEC §4.3).
    sim.line(r, r#"{"ack":{"id":"other"}}"#);
    sim.eof(r);
    assert!(sim.drain().untouched(r));
    sim.flushed(4, Ok(()));
    let d = sim.drain();
    assert_eq!(
        d.lines(r),
        [
            HubLine::Acked { id: id.clone() },
            HubLine::Error {
                message: crate::hub::pipeline::LINE_AFTER_THE_VERB.into()
            }
        ]
    );
    assert_eq!(sim.status("mneme", &id).state, "acked");
}

#[test]
fn a_duplicate_resend_waits_for_the_outstanding_flush_too() {
    let mut sim = Sim::durable();
    let c = sim.send_id("mneme", "dup-1", "datastore", "task", None, "{}");
    sim.commit_unflushed(1);
    sim.drain();
    // The sender gave up waiting and resent; the first copy is written, not yet flushed.
    let again = sim.send_id("mneme", "dup-1", "datastore", "task", None, "{}");
    let d = sim.drain();
    assert!(
        d.untouched(again),
        "a duplicate must not confirm what is not on disk"
    );
    assert!(!sim.hub.has_staged(), "and it stages nothing");
    sim.flushed(1, Ok(()));
    let d = sim.drain();
    for conn in [c, again] {
        assert_eq!(d.lines(conn), [HubLine::Accepted { id: "dup-1".into() }]);
    }
    assert_eq!(sim.queued_ids("datastore"), ["dup-1"]);
    // With nothing outstanding, a duplicate is answered at once.
    let third = sim.send_id("mneme", "dup-1", "datastore", "task", None, "{}");
    assert_eq!(
        sim.drain().lines(third),
        [HubLine::Accepted { id: "dup-1".into() }]
    );
}

#[test]
fn a_sender_gone_before_the_flush_leaves_its_envelope_queued() {
    let mut sim = Sim::durable();
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    sim.commit_unflushed(1);
    sim.drain();
    sim.closed(c, false);
    let d = sim.drain();
    assert!(
        d.logs.iter().any(
            |l| l.contains("outcome=accepted") && l.contains("closed before the store's flush")
        ),
        "{:?}",
        d.logs
    );
    sim.flushed(1, Ok(()));
    assert!(
        sim.drain().untouched(c),
        "nothing is written to a released connection"
    );
    assert_eq!(
        sim.queued_ids("datastore"),
        [id],
        "committed: a resend is a duplicate"
    );
}

mod commit;
mod forward;
mod ids;
mod pipelining;
mod redelivery;
