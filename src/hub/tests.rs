//! Deterministic simulation tests of the sans-IO `Hub` (SPEC §4–§5, wire-compat.md).
//!
//! Owns the `Sim` harness: a hub on a virtual clock, driven the way the IO loop drives it
//! (lines in, `staged_audit` + `commit` once per iteration, delivery outcomes reported back),
//! with every output decoded through the client's own `HubLine::decode`. Refuses sockets,
//! threads, sleeps and the real clock: time moves only through `Sim::advance`.

use super::*;
use crate::wire::HubLine;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};

const ROSTER: &str = r#"
[agents]
mneme = "tok-mneme"
datastore = "tok-datastore"
scribe = "tok-scribe"
"#;

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
    /// Store operations (only from a hub built `with_durable(true)`).
    store: Vec<crate::store::StoreOp>,
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
        self.envelope(c)["id"].as_str().expect("id is a string").to_owned()
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
                    let v: Value = serde_json::from_str(envelope).expect("audited envelope is JSON");
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
}

impl Sim {
    fn new() -> Sim {
        Sim::with_limits(|_| {})
    }

    /// `Limits::example()` with short handshake deadlines, then `tweak`.
    fn with_limits(tweak: impl FnOnce(&mut Limits)) -> Sim {
        let mut limits = Limits::example();
        limits.hello_timeout_ms = HELLO_MS;
        limits.verb_timeout_ms = VERB_MS;
        tweak(&mut limits);
        let roster = Roster::parse(ROSTER).expect("test roster is valid");
        Sim {
            hub: Hub::new(roster, limits),
            base: Instant::now(),
            elapsed: Duration::ZERO,
            wall: DateTime::parse_from_rfc3339("2026-07-21T06:40:51Z").expect("fixed time").with_timezone(&Utc),
            next_conn: 1,
            next_id: 1,
            out: Drained::default(),
            closed_by_hub: BTreeSet::new(),
            to_release: BTreeSet::new(),
            delivering: BTreeSet::new(),
        }
    }

    fn now(&self) -> Now {
        Now { mono: self.base + self.elapsed, wall: self.wall }
    }

    /// Milliseconds from the start of the simulation to the hub's next deadline.
    fn next_deadline_ms(&self) -> Option<u128> {
        self.hub.poll_timeout().map(|at| (at - self.base).as_millis())
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
        self.hub.handle_closed(c, flushed, if flushed { "closed" } else { "peer reset" }, now);
    }

    /// The socket accepted the first byte of `c`'s delivery.
    fn committed(&mut self, c: ConnId) {
        let now = self.now();
        self.hub.handle_delivery_committed(c, now);
    }

    /// The audit write of this iteration succeeded: the staged records go to the audit log
    /// (after the outputs already drained), then the hub settles them.
    fn commit_ok(&mut self) {
        self.collect();
        let staged: Vec<AuditEvent> = self.hub.staged_audit().collect();
        self.out.audit.extend(staged);
        let now = self.now();
        self.hub.commit(Ok(()), now);
    }

    /// The audit write failed: nothing staged reaches the log.
    fn commit_err(&mut self) {
        let now = self.now();
        self.hub.commit(Err("the audit log could not be written (disk full)".to_owned()), now);
    }

    /// Moves the virtual clock and lets the hub expire its deadlines, as the loop does.
    fn advance(&mut self, ms: u64) {
        self.elapsed += Duration::from_millis(ms);
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
                Output::Write { conn, line } | Output::Deliver { conn, line }
                    if self.closed_by_hub.contains(&conn) =>
                {
                    panic!("conn {conn}: wrote {line:?} after Close");
                }
                Output::Write { conn, line } => {
                    let decoded = decode(&line);
                    assert!(!matches!(decoded, HubLine::Envelope(_)), "envelopes go out as Deliver");
                    self.out.conns.entry(conn).or_default().lines.push(decoded);
                }
                Output::Deliver { conn, line } => {
                    let HubLine::Envelope(text) = decode(&line) else { panic!("Deliver carried {line:?}") };
                    let got = self.out.conns.entry(conn).or_default();
                    assert!(got.delivered.is_none(), "conn {conn}: a second delivery");
                    got.lines.push(HubLine::Envelope(text.clone()));
                    got.delivered = Some(text.clone());
                    self.out.deliveries.push((conn, serde_json::from_str(&text).expect("envelope is JSON")));
                    self.delivering.insert(conn);
                }
                Output::Close { conn } => {
                    assert!(self.closed_by_hub.insert(conn), "conn {conn}: closed twice");
                    self.to_release.insert(conn);
                    self.out.conns.entry(conn).or_default().closed = true;
                }
                Output::Audit(e) => self.out.audit.push(e),
                Output::Store(op) => self.out.store.push(op),
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

    fn send_body(&mut self, from: &str, to: &str, kind: &str, corr: Option<&str>, body: &str) -> (ConnId, String) {
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
        assert_eq!(self.out.conns.remove(&c).expect("a reply").lines, [HubLine::Accepted { id: id.clone() }]);
        self.closed(c, true);
        id
    }

    /// `name` logs in and sends an await line.
    fn await_(&mut self, name: &str, reply_to: Option<&str>, kind: Option<&str>, timeout_secs: Option<u64>) -> ConnId {
        let c = self.login(name);
        self.line(c, &await_text(reply_to, kind, timeout_secs));
        c
    }

    /// An unfiltered await with no timeout.
    fn park(&mut self, name: &str) -> ConnId {
        self.await_(name, None, None, None)
    }

    fn queued_ids(&self, agent: &str) -> Vec<String> {
        self.hub.router().queued(agent).map(|q| q.id.clone()).collect()
    }

    fn parked(&self, agent: &str) -> usize {
        self.hub.stats(agent).parked
    }
}

fn decode(line: &str) -> HubLine {
    let body = line.strip_suffix('\n').unwrap_or_else(|| panic!("line without its newline: {line:?}"));
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
        [AuditEvent::Connected { conn: c }, AuditEvent::Authenticated { conn: c, name: "mneme".into() }]
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
    assert!(d.error(c).starts_with("authentication failed"), "{}", d.error(c));
    assert!(d.closed(c));
    assert!(d.audit.contains(&AuditEvent::AuthFailed { conn: c, name: "mneme".into() }));
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
    assert!(d.audit.contains(&AuditEvent::AuthFailed { conn: unknown, name: "ghost".into() }));
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
    assert!(!d.audit.iter().any(|e| matches!(e, AuditEvent::Authenticated { name, .. } if name == "datastore")));
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
        assert!(d.error(c).starts_with("malformed line"), "conn {c}: {}", d.error(c));
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
fn blank_lines_are_ignored_in_every_phase() {
    let mut sim = Sim::new();
    let c = sim.open();
    for blank in ["", "   ", "\r", "\t \r"] {
        sim.line(c, blank);
    }
    sim.line(c, &hello_text("mneme", "tok-mneme"));
    for blank in ["", " \r"] {
        sim.line(c, blank);
    }
    sim.line(c, &send_text("e1", "datastore", "task", None, "{}"));
    sim.line(c, ""); // a blank line after the verb is not a second verb
    sim.commit_ok();
    let d = sim.drain();
    assert_eq!(d.lines(c), [HubLine::Ok, HubLine::Accepted { id: "e1".into() }]);
}

#[test]
fn an_overlong_line_gets_the_io_layers_error() {
    let mut sim = Sim::new();
    let c = sim.login("mneme");
    let now = sim.now();
    sim.hub.handle_bad_input(c, "line exceeds the limit of 1048576 bytes", now);
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
    assert_eq!(sim.next_deadline_ms(), None, "a staged send has no verb deadline");
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
    assert_eq!(env["correlationId"], Value::Null, "correlationId is always present");
    // The audit record holds the same stamped text the reader got.
    let audited = d
        .audit
        .iter()
        .find_map(|e| match e {
            AuditEvent::Accepted { conn: Some(conn), envelope } if *conn == c => Some(envelope.clone()),
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
    assert_eq!(d.error(c), "invalid envelope: kind \"bounce\" is reserved for the hub");
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
        assert_eq!(d.error(c), "invalid envelope: to \"hub\" names the hub itself, which receives nothing");
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
    assert_eq!((sim.queued_ids("x1"), sim.queued_ids("x2")), (vec![a], vec![b]));
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
        assert_eq!(d.delivered_id(expected), id, "expected conn {expected} to win");
        sim.io_flush();
    }
    assert_eq!(sim.parked("mneme"), 0);
}

#[test]
fn routing_is_oldest_first_within_a_tier() {
    let mut sim = Sim::new();
    let waiters = [sim.park("datastore"), sim.park("datastore"), sim.park("datastore")];
    let ids: Vec<String> = (0..3).map(|_| sim.send("mneme", "datastore", "task", None).1).collect();
    // One commit for all three, as one loop iteration would do.
    sim.commit_ok();
    let d = sim.drain();
    let got: Vec<(ConnId, String)> =
        d.deliveries.iter().map(|(c, v)| (*c, v["id"].as_str().unwrap().to_owned())).collect();
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
    assert_eq!(sim.queued_ids("mneme"), [wrong_kind.clone(), wrong_corr.clone(), no_corr.clone()]);
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
        assert_eq!(d.delivered_id(c), want, "await replyTo={reply_to:?} kind={kind:?}");
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
    assert!(d.audit.contains(&AuditEvent::Timeout { conn: c, name: "mneme".into() }));
    assert_eq!(sim.queued_ids("mneme"), [other]);
    assert_eq!(sim.parked("mneme"), 0);
    assert_eq!(sim.next_deadline_ms(), None);
}

#[test]
fn await_times_out_exactly_at_its_timeout_and_not_before() {
    let mut sim = Sim::new();
    sim.advance(250);
    let c = sim.await_("mneme", None, None, Some(5));
    assert_eq!(sim.next_deadline_ms(), Some(5_250), "the verb deadline gave way to the await's");
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
    assert!(d.audit.iter().any(|e| matches!(e, AuditEvent::Requeued { conn, id: i, .. } if *conn == first && *i == id)));
    assert!(d.untouched(non_matching));
    assert_eq!(d.delivered_id(next), id);
    sim.io_flush();
    let d = sim.drain();
    assert!(d.audit.contains(&AuditEvent::Delivered { conn: next, id: id.clone(), to: "datastore".into(), ack: false }));
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
    assert_eq!(sim.queued_ids("datastore"), [e1.clone(), e2], "order is preserved");
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
    assert_eq!((d.delivered_id(a), d.delivered_id(b)), (e1.clone(), e2.clone()));
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
            AuditEvent::Delivered { conn: reader, id: id.clone(), to: "datastore".into(), ack: false },
            AuditEvent::Lost { conn: reader, id: id.clone(), to: "datastore".into(), reason: "peer reset".into(), bounced: true },
        ]
    );
    assert!(d.untouched(orchestrator), "the bounce is committed like any envelope first");
    assert!(sim.queued_ids("datastore").is_empty(), "a lost envelope is not requeued");
    assert!(sim.hub.has_staged());
    sim.commit_ok();
    let d = sim.drain();
    let bounce = d.envelope(orchestrator);
    assert_eq!(bounce["from"], "hub");
    assert_eq!(bounce["to"], "mneme");
    assert_eq!(bounce["kind"], "bounce");
    assert_eq!(bounce["correlationId"], id.as_str());
    assert_eq!(bounce["ts"], "2026-07-21T06:40:51.000Z", "stamped from the wall clock passed in");
    assert_eq!(bounce["body"], json!({"id": id, "to": "datastore", "reason": "peer reset"}));
    assert_ne!(bounce["id"], id.as_str());
    assert!(matches!(&d.audit[0], AuditEvent::Accepted { conn: None, envelope } if **envelope == *d.envelope_text(orchestrator)));
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
    assert!(d.audit.iter().any(|e| matches!(e, AuditEvent::Lost { conn, bounced: false, .. } if *conn == orchestrator)));
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
    assert_eq!(d.audit, [AuditEvent::Delivered { conn: c, id, to: "datastore".into(), ack: false }]);
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
    assert_eq!(sim.parked("datastore"), 0, "the staged send claimed the waiter");
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
    let kept = [sim.sent("mneme", "datastore", "task", None), sim.sent("mneme", "datastore", "task", None)];
    sim.drain();
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    let d = sim.drain();
    // Refused at once: there is nothing to commit.
    assert!(d.error(c).contains("is full (limit 2 envelopes"), "{}", d.error(c));
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
    assert_eq!(sim.drain().lines(c1), [HubLine::Accepted { id: first.clone() }]);
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
    assert_eq!(d.error(c), "envelope not accepted: the audit log could not be written (disk full)");
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
    assert!(sim.hub.has_staged(), "no sender to tell, so the bounce must not be dropped");
    assert!(sim.queued_ids("mneme").is_empty());
    sim.commit_ok();
    let queued: Vec<_> = sim.hub.router().queued("mneme").cloned().collect();
    assert_eq!(queued.len(), 1);
    assert_eq!(queued[0].kind, "bounce");
}

// ===== one verb per connection (wire-compat "Known faults") =====

#[test]
fn a_second_line_while_a_send_is_staged_cancels_it() {
    let mut sim = Sim::new();
    let (c, id) = sim.send("mneme", "datastore", "task", None);
    sim.line(c, &send_text("again", "datastore", "task", None, "{}"));
    let d = sim.drain();
    assert!(d.error(c).starts_with("a second line after the verb"), "{}", d.error(c));
    assert_eq!(d.lines(c).len(), 1);
    assert_eq!(d.refused_ids(), [id.as_str()]);
    sim.commit_ok();
    let d = sim.drain();
    assert!(d.accepted_ids().is_empty());
    assert!(sim.queued_ids("datastore").is_empty());
}

#[test]
fn a_second_line_while_parked_cancels_the_await() {
    let mut sim = Sim::new();
    let c = sim.park("datastore");
    sim.line(c, &await_text(None, None, None));
    let d = sim.drain();
    assert!(d.error(c).starts_with("a second line after the verb"));
    assert_eq!(sim.parked("datastore"), 0);
    let id = sim.sent("mneme", "datastore", "task", None);
    assert!(sim.drain().deliveries.is_empty());
    assert_eq!(sim.queued_ids("datastore"), [id]);
}

#[test]
fn a_second_line_from_a_claimed_waiter_cancels_it_and_the_envelope_routes_on() {
    let mut sim = Sim::new();
    let claimed = sim.park("datastore");
    let (sender, id) = sim.send("mneme", "datastore", "task", None);
    sim.line(claimed, "{}");
    sim.commit_ok();
    let d = sim.drain();
    assert!(d.error(claimed).starts_with("a second line after the verb"));
    assert!(d.conns[&claimed].delivered.is_none(), "nothing consumed by the cancelled await");
    assert_eq!(d.lines(sender), [HubLine::Accepted { id: id.clone() }]);
    assert_eq!(sim.queued_ids("datastore"), [id]);
}

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
    let d = sim.drain();
    assert_eq!(d.error(parked), "hub is shutting down; nothing was consumed");
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
