//! Fuzz target `hub_session`: the hub core (`hub::Hub`) behind the client line decoder
//! (`wire::LineBuffer`, `wire::ClientLine`), driven the way the server's loop drives it
//! (`event_loop`: read → `handle_line` per line → `handle_timeout` → the commit point, each
//! `Output::Commit` written or failed as the store's health says and reported back → flushes
//! reported with `handle_synced` → flush sockets, reporting the first accepted byte of each
//! delivery → `handle_closed`), with arbitrary bytes and lines on up
//! to four connections, socket faults, store failures, a clock, shutdown, and a forwarding peer.
//!
//! Checks, on every output: a line only to a connection the core holds, never after its Close,
//! one Close per connection; every line one JSON line of a known tag, in the order SPEC §4
//! allows (`ok`, then one final reply, an ack-mode delivery then its `acked` or error); a
//! delivery only to the agent the connection authenticated as, with the exact text of an
//! accepted envelope; a forward only of an accepted envelope; service-log lines single lines
//! that never hold a roster token presented in a hello (SPEC §8.2). At the end, once every
//! client has gone and the store has caught up: the core holds no connection, and every
//! accepted envelope is queued, delivered, acked or acked by the peer (nothing lost).

use super::cursor::{Cursor, Writer};
use agent_hub_host::config::Limits;
use agent_hub_proto::hub::durable::StoreFailure;
use agent_hub_proto::hub::{AuditEvent, ConnId, Hub, Output};
use agent_hub_proto::kernel::now::Now;
use agent_hub_proto::roster::Roster;
use agent_hub_proto::wire::{HubLine, LineBuffer};
use chrono::{DateTime, Utc};
use serde_json::{json, Value};
use std::collections::{BTreeSet, HashMap};
use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The roster of `protocol/hub/transcripts.json`, so its transcripts are seeds that log in.
pub const AGENTS: [(&str, &str); 3] = [
    ("mneme", "tok-mneme-7c1d3f9a"),
    ("datastore", "tok-datastore-2b8e6a40"),
    ("scribe", "tok-scribe-91f0c5d7"),
];
/// The forwarding peer and this hub's relay id (SPEC §15).
const PEER: &str = "mini";
const LOCAL: &str = "laptop";
/// Client connections at once (slots; a released slot opens a new connection).
const SLOTS: usize = 4;
/// The line cap here, so an overlong line costs a fuzzer a kilobyte, not a megabyte.
const MAX_LINE_BYTES: usize = 1024;
/// The line cap of the transcripts (`config.example.toml`); their overlong lines are scaled.
const EXAMPLE_LINE_BYTES: usize = 1_048_576;

fn roster() -> Roster {
    static R: OnceLock<Roster> = OnceLock::new();
    R.get_or_init(|| {
        let text: String = std::iter::once("[agents]\n".to_owned())
            .chain(AGENTS.iter().map(|(n, t)| format!("{n} = \"{t}\"\n")))
            .collect();
        Roster::parse(&text).expect("the fuzz roster is valid")
    })
    .clone()
}

/// Header bits (the first byte).
const H_TIGHT: u8 = 1; // small queue caps and idempotency window
const H_FLUSHER: u8 = 2; // a durable store whose commits wait for a flush
const H_FORWARD: u8 = 4; // forwarding with PEER enabled

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The next delivery is refused before its first byte.
    ZeroBytes,
    /// The next delivery is cut off after its first byte.
    Partial,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Health {
    Ok,
    /// The next commit attempt fails.
    FailOnce,
    /// Attempts carrying sends fail (a full store); acks and removals still go in.
    Full,
    /// Every attempt fails.
    Failing,
}

/// The kinds of reply line, for the order check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tag {
    Ok,
    Error,
    Envelope,
    Acked,
    /// `accepted`, `timeout`, `status`, `who`.
    Final,
}

/// A client connection as the loop sees it.
struct SimConn {
    id: ConnId,
    input: LineBuffer,
    /// Input is no longer read into the core (after a Close or an overlong line).
    discard: bool,
    read_eof: bool,
    /// The core asked for a close.
    closing: bool,
    /// The core's exchange is over (`Output::Answered`): lines still go to the core until
    /// the client closes or the answer linger passes, when the loop releases the socket.
    answered: bool,
    /// When the answered connection's output was all flushed (the linger runs from it).
    answered_since: Option<Instant>,
    /// Output waits in the socket's buffer: (a delivery not yet started, anything at all).
    delivery_unstarted: bool,
    has_output: bool,
    /// When unflushed output started waiting (for the write deadline).
    waiting_since: Option<Instant>,
    stuck: bool,
    fault: Option<Fault>,
    name: Option<String>,
    tags: Vec<Tag>,
    /// The id of the envelope delivered here, for an ack line.
    delivered_id: Option<String>,
}

struct Sim {
    hub: Hub,
    limits: Limits,
    base: Instant,
    now: Now,
    slots: [Option<SimConn>; SLOTS],
    next_conn: ConnId,
    /// Every id the core was ever told about, and those released with `handle_closed`.
    known: BTreeSet<ConnId>,
    released: BTreeSet<ConnId>,
    dirty: BTreeSet<ConnId>,
    health: Health,
    flusher: bool,
    pending_flushes: Vec<u64>,
    forwarding: bool,
    /// Forwards handed to the relay and not yet acked by our simulated peer, by seq.
    forwards: Vec<u64>,
    next_ack_id: u64,
    shut_down: bool,
    /// Accepted envelope texts (from the audit batches that were written), with counts.
    accepted: HashMap<String, usize>,
    accepted_total: usize,
    delivered_plain: usize,
    acked: usize,
    forward_acked: usize,
    /// A token appeared in a line that is not a hello, so it may be logged as a plain value.
    token_public: bool,
}

fn conn_of(slots: &mut [Option<SimConn>; SLOTS], id: ConnId) -> Option<&mut SimConn> {
    slots.iter_mut().flatten().find(|c| c.id == id)
}

impl Sim {
    fn new(header: u8) -> Sim {
        let mut limits = Limits::example();
        limits.max_line_bytes = MAX_LINE_BYTES;
        limits.hello_timeout_ms = 1_000;
        limits.verb_timeout_ms = 2_000;
        limits.write_timeout_ms = 3_000;
        limits.ack_timeout_ms = 4_000;
        if header & H_TIGHT != 0 {
            limits.queue_max_envelopes = 3;
            limits.queue_max_bytes = 2_048;
            limits.hub_max_bytes = 4_096;
            limits.idempotency_window_secs = 30;
            limits.idempotency_max_ids = 6;
        }
        let flusher = header & H_FLUSHER != 0;
        let forwarding = header & H_FORWARD != 0;
        // Bounce ids from a seed: a crash reproduces from its input alone.
        let ids = agent_hub_proto::kernel::ids::SeededIds::new(u64::from(header));
        let mut hub = Hub::new(roster(), limits.clone(), Box::new(ids))
            .with_durable(flusher)
            .with_sync(flusher);
        if forwarding {
            hub.enable_forwarding(LOCAL, [PEER.to_owned()], 2);
        }
        let base = Instant::now();
        let now = Now {
            mono: base,
            wall: DateTime::parse_from_rfc3339("2026-07-21T06:40:51Z")
                .expect("a fixed time")
                .with_timezone(&Utc),
        };
        hub.start_purging(now);
        Sim {
            hub,
            limits,
            base,
            now,
            slots: Default::default(),
            next_conn: 1,
            known: BTreeSet::new(),
            released: BTreeSet::new(),
            dirty: BTreeSet::new(),
            health: Health::Ok,
            flusher,
            pending_flushes: Vec::new(),
            forwarding,
            forwards: Vec::new(),
            next_ack_id: 1,
            shut_down: false,
            accepted: HashMap::new(),
            accepted_total: 0,
            delivered_plain: 0,
            acked: 0,
            forward_acked: 0,
            token_public: false,
        }
    }

    // ----- the loop's steps -----

    /// The open connection in `slot`, accepting a new one if the slot is free.
    fn open(&mut self, slot: usize) -> ConnId {
        if let Some(c) = &self.slots[slot] {
            return c.id;
        }
        let id = self.next_conn;
        self.next_conn += 1;
        self.known.insert(id);
        self.slots[slot] = Some(SimConn {
            id,
            input: LineBuffer::new(),
            discard: false,
            read_eof: false,
            closing: false,
            answered: false,
            answered_since: None,
            delivery_unstarted: false,
            has_output: false,
            waiting_since: None,
            stuck: false,
            fault: None,
            name: None,
            tags: Vec::new(),
            delivered_id: None,
        });
        self.hub.handle_connect(id, self.now);
        self.drain();
        id
    }

    /// Bytes read from the client in `slot`: lines into the core, as `Server::read` does.
    fn read(&mut self, slot: usize, bytes: &[u8]) {
        let id = self.open(slot);
        let Some(c) = &mut self.slots[slot] else {
            return;
        };
        if c.read_eof || c.discard {
            return;
        }
        c.input.push(bytes);
        loop {
            let Some(c) = conn_of(&mut self.slots, id) else {
                return;
            };
            if c.discard {
                break;
            }
            match c.input.next_line(MAX_LINE_BYTES) {
                Ok(Some(line)) => {
                    let line = line.to_vec();
                    self.note_tokens(&line);
                    self.hub.handle_line(id, &line, self.now);
                }
                Ok(None) => break,
                Err(too_long) => {
                    c.discard = true;
                    c.input = LineBuffer::new();
                    self.hub
                        .handle_bad_input(id, &too_long.to_string(), self.now);
                }
            }
            self.drain();
        }
        if let Some(c) = conn_of(&mut self.slots, id) {
            c.input.shrink();
        }
    }

    /// A token is a secret where a client presents it: as a string value inside a hello
    /// (`{"hello":{"token":…}}`, or misshapen, `{"hello":"…"}`). Anywhere else (an id, a kind,
    /// a key) it is a plain value an error may quote, and the check is off from then on.
    fn note_tokens(&mut self, line: &[u8]) {
        let text = String::from_utf8_lossy(line);
        if !AGENTS.iter().any(|(_, t)| text.contains(t)) {
            return;
        }
        let hello = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| match v {
                Value::Object(m) if m.len() == 1 => m.get("hello").cloned(),
                _ => None,
            });
        let public = match hello {
            None => true,
            Some(h) => {
                let mut keys = Vec::new();
                collect_keys(&h, &mut keys);
                keys.iter()
                    .any(|k| AGENTS.iter().any(|(_, t)| k.contains(t)))
            }
        };
        self.token_public |= public;
    }

    fn eof(&mut self, slot: usize) {
        let Some(c) = &mut self.slots[slot] else {
            return;
        };
        if c.read_eof {
            return;
        }
        c.read_eof = true;
        let id = c.id;
        let answered = c.answered && !c.has_output;
        self.hub.handle_eof(id, self.now);
        self.drain();
        if answered {
            // The client closed an answered connection: the loop releases it.
            self.close(id, true, "closed");
        }
    }

    /// The socket is released: the core hears of it once, and the slot is free.
    fn close(&mut self, id: ConnId, flushed: bool, reason: &str) {
        let Some(slot) = self
            .slots
            .iter()
            .position(|c| c.as_ref().is_some_and(|c| c.id == id))
        else {
            return;
        };
        let c = self.slots[slot].take().expect("found above");
        self.dirty.remove(&id);
        assert!(self.released.insert(id), "conn {id} released twice");
        self.hub
            .handle_closed(id, flushed && !c.has_output, reason, self.now);
        self.drain();
    }

    /// `Server::flush_conn`: the socket takes what it can.
    fn flush(&mut self, id: ConnId) {
        let Some(c) = conn_of(&mut self.slots, id) else {
            return;
        };
        if c.delivery_unstarted && c.read_eof {
            return self.close(id, false, "reader gone before delivery");
        }
        if c.stuck || !c.has_output {
            if c.has_output {
                c.waiting_since.get_or_insert(self.now.mono);
            } else if c.closing {
                return self.close(id, true, "closed");
            } else if c.answered {
                c.answered_since.get_or_insert(self.now.mono);
            }
            return;
        }
        if c.delivery_unstarted {
            match c.fault.take() {
                Some(Fault::ZeroBytes) => {
                    return self.close(id, false, "write failed: connection reset by peer")
                }
                Some(Fault::Partial) => {
                    c.delivery_unstarted = false;
                    self.hub.handle_delivery_committed(id, self.now);
                    self.drain();
                    return self.close(id, false, "write failed: connection reset by peer");
                }
                None => {
                    c.delivery_unstarted = false;
                    self.hub.handle_delivery_committed(id, self.now);
                    self.drain();
                }
            }
        }
        let Some(c) = conn_of(&mut self.slots, id) else {
            return;
        };
        c.has_output = false;
        c.waiting_since = None;
        if c.closing {
            self.close(id, true, "closed");
        } else if c.answered {
            if c.read_eof {
                self.close(id, true, "closed");
            } else {
                c.answered_since.get_or_insert(self.now.mono);
            }
        }
    }

    /// The end of an iteration (`Server::settle`): the core's commit point, then the sockets.
    fn settle(&mut self) {
        loop {
            self.drain();
            self.hub.handle_commit_point(self.now, false);
            self.drain();
            if self.dirty.is_empty() {
                break;
            }
            for id in std::mem::take(&mut self.dirty) {
                self.flush(id);
            }
        }
    }

    /// `Server::write_batch`, with the store's health deciding; a written audit batch is
    /// counted.
    fn execute(&mut self, batch: agent_hub_proto::hub::Batch) {
        let sends = batch
            .audit
            .iter()
            .any(|e| matches!(e, AuditEvent::Accepted { .. }));
        let fails = match self.health {
            Health::Ok => false,
            Health::FailOnce => {
                self.health = Health::Ok;
                true
            }
            Health::Full => sends,
            Health::Failing => true,
        };
        let result = if fails {
            Err("the queue store could not be written (disk full)".to_owned())
        } else {
            for ev in &batch.audit {
                match ev {
                    AuditEvent::Accepted { envelope, .. } => {
                        *self.accepted.entry(envelope.to_string()).or_default() += 1;
                        self.accepted_total += 1;
                    }
                    AuditEvent::Acked { .. } => self.acked += 1,
                    _ => {}
                }
            }
            if batch.sync {
                self.pending_flushes.push(batch.id);
            }
            Ok(())
        };
        self.hub
            .handle_committed(batch.id, result.map_err(StoreFailure::new), self.now);
    }

    /// The store's flush reports the oldest pending batch, or all of them.
    fn synced(&mut self, ok: bool, all: bool) {
        if self.pending_flushes.is_empty() {
            return;
        }
        let through = if all {
            self.pending_flushes.drain(..).next_back()
        } else {
            Some(self.pending_flushes.remove(0))
        };
        let result = if ok {
            Ok(())
        } else {
            Err("fdatasync failed: Input/output error (os error 5)".to_owned())
        };
        if let Some(batch) = through {
            self.hub
                .handle_synced(batch, result.map_err(StoreFailure::new), self.now);
        }
        self.drain();
    }

    fn advance(&mut self, d: Duration) {
        self.now = Now {
            mono: self.now.mono + d,
            wall: self.now.wall + d,
        };
    }

    /// The rest of an iteration after its input: deadlines, the write deadline, settle.
    fn iterate(&mut self) {
        self.hub.handle_timeout(self.now);
        self.drain();
        let write_timeout = self.limits.write_timeout();
        let late: Vec<ConnId> = self
            .slots
            .iter()
            .flatten()
            .filter(|c| {
                c.waiting_since
                    .is_some_and(|t| self.now.mono >= t + write_timeout)
            })
            .map(|c| c.id)
            .collect();
        for id in late {
            self.close(id, false, "write deadline passed");
        }
        // The answer linger passed: the loop ends the connection (input is discarded from
        // then on) and releases it when the client closes; the core hears of the release.
        let linger = self.limits.answer_linger();
        let ended: Vec<ConnId> = self
            .slots
            .iter()
            .flatten()
            .filter(|c| {
                c.answered
                    && c.answered_since
                        .is_some_and(|t| self.now.mono >= t + linger)
            })
            .map(|c| c.id)
            .collect();
        for id in ended {
            self.close(id, true, "closed after linger");
        }
        self.settle();
    }

    // ----- outputs, checked -----

    fn drain(&mut self) {
        while let Some(out) = self.hub.poll_output() {
            self.apply(out);
        }
    }

    fn apply(&mut self, out: Output) {
        match out {
            Output::Write { conn, line } => {
                let c = self.live(conn, "a line");
                let decoded = decode(&line);
                let tag = match decoded {
                    HubLine::Ok => Tag::Ok,
                    HubLine::Error { .. } => Tag::Error,
                    HubLine::Acked { .. } => Tag::Acked,
                    HubLine::Envelope(_) => {
                        panic!("conn {conn}: an envelope written as a plain line")
                    }
                    _ => Tag::Final,
                };
                push_tag(conn, c, tag);
                c.has_output = true;
                self.dirty.insert(conn);
            }
            Output::Handoff { conn, line } => {
                let HubLine::Envelope(text) = decode(&line) else {
                    panic!("conn {conn}: Handoff carried {line:?}")
                };
                assert!(
                    self.accepted.contains_key(&text),
                    "conn {conn}: delivered an envelope that was never accepted: {text}"
                );
                let env: Value = serde_json::from_str(&text).expect("an accepted envelope is JSON");
                let c = self.live(conn, "a delivery");
                let to = env["to"].as_str().unwrap_or("");
                assert_eq!(
                    Some(to),
                    c.name.as_deref(),
                    "conn {conn}: delivered mail for {to:?} to another agent"
                );
                c.delivered_id = env["id"].as_str().map(str::to_owned);
                push_tag(conn, c, Tag::Envelope);
                c.delivery_unstarted = true;
                c.has_output = true;
                self.dirty.insert(conn);
            }
            Output::Close { conn, .. } => {
                let c = self.live(conn, "a close");
                c.closing = true;
                c.discard = true;
                c.answered = false;
                self.dirty.insert(conn);
            }
            Output::Answered { conn } => {
                let c = self.live(conn, "an answer");
                assert!(!c.answered, "conn {conn}: answered twice");
                c.answered = true;
                self.dirty.insert(conn);
            }
            Output::Audit(ev) => match ev {
                AuditEvent::Authenticated { conn, name } => {
                    assert!(
                        AGENTS.iter().any(|(n, _)| *n == name),
                        "authenticated as {name:?}"
                    );
                    let c = self.live(conn, "an authentication");
                    assert!(c.name.is_none(), "conn {conn}: authenticated twice");
                    c.name = Some(name);
                }
                AuditEvent::Delivered { ack: false, .. } => self.delivered_plain += 1,
                AuditEvent::ForwardAcked { .. } => self.forward_acked += 1,
                _ => {}
            },
            // No `[tasks]` table in the fuzzed hub: nothing is ever delegated.
            // Nor does it hear from relay peers about tasks.
            Output::StartTask(_)
            | Output::CancelTask { .. }
            | Output::AnswerTask { .. }
            | Output::PromptTask { .. }
            | Output::CloseTask { .. }
            | Output::KillOrphan { .. }
            | Output::ToPeer(_) => {
                unreachable!("no tasks are configured")
            }
            // A fuzzed `turn` line with a pid asks for process checks; the driver reports
            // none exited, so liveness stays as the lines left it.
            Output::CheckProcesses(_) => {}
            Output::Log(line) => {
                assert!(
                    !line.contains('\n') && !line.contains('\r'),
                    "a service-log line spans lines: {line:?}"
                );
                if !self.token_public {
                    for (_, token) in AGENTS {
                        assert!(
                            !line.contains(token),
                            "a token reached the service log: {line}"
                        );
                    }
                }
            }
            Output::LogError(line) => {
                assert!(
                    !line.contains('\n') && !line.contains('\r'),
                    "a service-log line spans lines: {line:?}"
                );
            }
            Output::Commit(batch) => self.execute(batch),
            Output::Forward {
                peer,
                seq,
                envelope,
            } => {
                assert!(self.forwarding && peer == PEER, "forward to {peer:?}");
                assert!(
                    self.accepted.contains_key(&*envelope),
                    "forwarded an envelope that was never accepted: {envelope}"
                );
                self.forwards.push(seq);
            }
            Output::ForwardAck { peer, .. } => {
                assert!(self.forwarding && peer == PEER, "forward ack to {peer:?}");
            }
        }
    }

    /// The connection an output names: one the core was told about and not yet released,
    /// that it has not closed.
    fn live(&mut self, conn: ConnId, what: &str) -> &mut SimConn {
        assert!(
            self.known.contains(&conn),
            "{what} for conn {conn}, which never connected"
        );
        assert!(
            !self.released.contains(&conn),
            "{what} for conn {conn} after handle_closed"
        );
        let c = conn_of(&mut self.slots, conn).expect("an unreleased conn has a slot");
        assert!(!c.closing, "conn {conn}: {what} after Close");
        c
    }

    // ----- the end: everyone leaves, the store catches up -----

    fn wind_down(&mut self) {
        self.health = Health::Ok;
        for _ in 0..4 {
            for slot in 0..SLOTS {
                if let Some(c) = &mut self.slots[slot] {
                    c.stuck = false;
                    c.fault = None;
                }
                self.eof(slot);
            }
            if self.forwarding {
                self.hub.handle_link_down(PEER, "fuzz: the end", self.now);
                self.forwards.clear();
            }
            self.settle();
            self.synced(true, true);
            self.settle();
            self.advance(Duration::from_secs(3_600));
            self.iterate();
        }
        assert!(
            self.slots.iter().all(Option::is_none),
            "connections still open after every client left"
        );
        assert_eq!(
            self.hub.open_connections(),
            0,
            "the core still holds connections"
        );
        let queued = self.hub.total_queued();
        assert_eq!(
            self.accepted_total,
            queued + self.delivered_plain + self.acked + self.forward_acked,
            "accepted {} = queued {queued} + delivered {} + acked {} + acked by the peer {}",
            self.accepted_total,
            self.delivered_plain,
            self.acked,
            self.forward_acked
        );
    }
}

fn collect_keys(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                out.push(k.clone());
                collect_keys(v, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|v| collect_keys(v, out)),
        _ => {}
    }
}

/// Checks one line from the hub as the client reads it.
fn decode(line: &str) -> HubLine {
    let body = line
        .strip_suffix('\n')
        .unwrap_or_else(|| panic!("a line without its newline: {line:?}"));
    assert!(!body.contains('\n'), "two lines in one output: {line:?}");
    HubLine::decode(body.as_bytes()).unwrap_or_else(|e| panic!("the client refuses {line:?}: {e}"))
}

/// SPEC §4: `ok` first (only after a hello), then one final reply; an ack-mode delivery may be
/// followed by its `acked` or an error. One error after a final reply is tolerated (a
/// pipelined extra line's answer, should the SPEC give it one).
fn push_tag(conn: ConnId, c: &mut SimConn, tag: Tag) {
    c.tags.push(tag);
    let ok = matches!(
        c.tags.as_slice(),
        [Tag::Ok]
            | [Tag::Error]
            | [Tag::Ok, Tag::Error | Tag::Final | Tag::Envelope]
            | [Tag::Ok, Tag::Envelope, Tag::Acked | Tag::Error]
            | [Tag::Ok, Tag::Final, Tag::Error]
            | [Tag::Ok, Tag::Envelope, Tag::Acked, Tag::Error]
    );
    assert!(
        ok,
        "conn {conn}: reply lines in an order SPEC §4 forbids: {:?}",
        c.tags
    );
}

// ----- the input language -----

const OPS: u8 = 12;

/// Builds a client line from a template and parameters (so a fuzzer reaches the verbs
/// without guessing a token).
fn template(c: &mut Cursor<'_>, sim: &Sim, slot: usize) -> Vec<u8> {
    let kind = c.u8();
    let p = c.u8();
    let agent = |i: u8| -> String {
        match i % 6 {
            i @ 0..=2 => AGENTS[usize::from(i)].0.to_owned(),
            3 => format!("{}@{PEER}", AGENTS[0].0),
            4 => "ghost".to_owned(),
            _ => "hub".to_owned(),
        }
    };
    let id = |i: u8| format!("e{}", i % 16);
    let line = match kind % 7 {
        0 => {
            let (name, token) = AGENTS[usize::from(p % 3)];
            let token = if p & 0x80 == 0 { token } else { "tok-wrong" };
            let name = if p & 0x40 == 0 { name } else { "ghost" };
            json!({"hello": {"name": name, "token": token}}).to_string()
        }
        1 => {
            let to = agent(c.u8());
            let kinds = ["task", "reply", "note", "bounce"];
            let k = kinds[usize::from(c.u8() % 4)];
            let corr = match c.u8() % 3 {
                0 => Value::Null,
                n => Value::String(id(n.wrapping_mul(c.u8()))),
            };
            let body = c.chunk();
            let body = serde_json::from_slice::<Value>(body)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(body).into_owned()));
            json!({"send": {"id": id(p), "from": "forged", "to": to,
                "ts": "2026-07-21T06:40:51Z", "kind": k, "correlationId": corr, "body": body}})
            .to_string()
        }
        2 => {
            let opt = |b: u8, v: String| {
                if b & 1 == 0 {
                    Value::Null
                } else {
                    Value::String(v)
                }
            };
            let reply_to = opt(p, id(c.u8()));
            let kind = opt(
                p >> 1,
                ["task", "reply", "note"][usize::from(c.u8() % 3)].to_owned(),
            );
            let secs: Value = match c.u8() % 6 {
                0 => Value::Null,
                1 => 0.into(),
                2 => 1.into(),
                3 => 5.into(),
                4 => 3_600.into(),
                _ => u64::MAX.into(),
            };
            let mut a = json!({"replyTo": reply_to, "kind": kind, "timeoutSecs": secs});
            if p & 4 != 0 {
                a["ack"] = Value::Bool(p & 8 != 0);
            }
            json!({ "await": a }).to_string()
        }
        3 => {
            let delivered = sim.slots[slot]
                .as_ref()
                .and_then(|c| c.delivered_id.clone());
            let ack = match (p & 1, delivered) {
                (0, Some(d)) => d,
                _ => id(c.u8()),
            };
            json!({"ack": {"id": ack}}).to_string()
        }
        4 => json!({"status": {"id": id(p)}}).to_string(),
        5 => "{\"who\":{}}".to_owned(),
        _ => {
            let lines = [
                "",
                "   ",
                "[]",
                "{}",
                "{\"hello\":\"tok-mneme-7c1d3f9a\"}",
                "{\"send\":{}}",
                "{\"hello\":{\"name\":\"mneme\",\"token\":\"tok-mneme-7c1d3f9a\"},\"who\":{}}",
                "{\"await\":{\"timeoutSecs\":-1}}",
            ];
            lines[usize::from(p) % lines.len()].to_owned()
        }
    };
    let mut bytes = line.into_bytes();
    bytes.push(b'\n');
    bytes
}

/// An envelope as a peer hub forwards it (`bus_forward`'s text).
fn forwarded_text(c: &mut Cursor<'_>) -> String {
    let p = c.u8();
    if p & 0x80 != 0 {
        return String::from_utf8_lossy(c.chunk()).into_owned();
    }
    let to = match p % 4 {
        0 => format!("{}@{LOCAL}", AGENTS[1].0),
        1 => format!("{}@{LOCAL}", AGENTS[2].0),
        2 => format!("ghost@{LOCAL}"),
        _ => AGENTS[1].0.to_owned(),
    };
    let (from, kind) = if p & 0x40 != 0 {
        ("hub", "bounce")
    } else {
        ("remote", "task")
    };
    json!({"id": format!("r{}", c.u8() % 8), "from": from, "to": to,
        "ts": "2026-07-21T06:40:51Z", "kind": kind, "correlationId": null,
        "body": {"n": p}})
    .to_string()
}

pub fn run(data: &[u8]) {
    let mut c = Cursor::new(data);
    let mut sim = Sim::new(c.u8());
    while let Some(op) = c.op() {
        let slot = usize::from(c.u8()) % SLOTS;
        match op % OPS {
            0 => {
                let bytes = c.chunk();
                sim.read(slot, bytes);
            }
            1 => {
                let line = template(&mut c, &sim, slot);
                sim.read(slot, &line);
            }
            2 => sim.eof(slot),
            3 => {
                if let Some(id) = sim.slots[slot].as_ref().map(|c| c.id) {
                    sim.close(id, false, "read failed: connection reset by peer");
                }
            }
            4 => {
                let ms = match c.u8() % 4 {
                    0 => u64::from(c.u8()),
                    1 => u64::from(c.u16()),
                    2 => u64::from(c.u8()) * 1_000,
                    _ => u64::from(c.u16()) * 1_000,
                };
                sim.advance(Duration::from_millis(ms));
            }
            5 => {
                sim.health = match c.u8() % 4 {
                    0 => Health::Ok,
                    1 => Health::FailOnce,
                    2 => Health::Full,
                    _ => Health::Failing,
                };
            }
            6 => {
                let b = c.u8();
                sim.synced(b & 1 == 0, b & 2 == 0);
            }
            7 => {
                let on = c.u8() & 1 == 1;
                if let Some(s) = &mut sim.slots[slot] {
                    s.stuck = on;
                }
            }
            8 => {
                let f = if c.u8() & 1 == 0 {
                    Fault::ZeroBytes
                } else {
                    Fault::Partial
                };
                sim.open(slot);
                if let Some(s) = &mut sim.slots[slot] {
                    s.fault = Some(f);
                }
            }
            9 => {
                if !sim.shut_down {
                    sim.shut_down = true;
                    sim.hub.shutdown(sim.now);
                }
            }
            10 if sim.forwarding => match c.u8() % 4 {
                0 => sim.hub.handle_link_up(PEER, sim.now),
                1 => {
                    sim.hub
                        .handle_link_down(PEER, "fuzz: link dropped", sim.now);
                    sim.forwards.clear();
                }
                2 => {
                    let text = forwarded_text(&mut c);
                    let hop = u32::from(c.u8() % 10);
                    let ack_id = format!("m{}", sim.next_ack_id);
                    sim.next_ack_id += 1;
                    sim.hub.handle_forwarded(PEER, ack_id, &text, hop);
                }
                _ => {
                    let b = c.u8();
                    let seq = if sim.forwards.is_empty() {
                        u64::from(b)
                    } else {
                        sim.forwards.remove(usize::from(b) % sim.forwards.len())
                    };
                    let error = (b & 0x80 != 0).then(|| "no agent named that here".to_owned());
                    sim.hub.handle_forward_ack(PEER, seq, error, sim.now);
                }
            },
            10 => {}
            _ => {
                sim.open(slot);
            }
        }
        sim.drain();
        sim.iterate();
    }
    sim.wind_down();
}

// ----- seeds -----

/// Writes inputs in the language `run` reads.
pub struct Script {
    w: Writer,
}

impl Script {
    pub fn new(header: u8) -> Script {
        let mut w = Writer::new();
        w.u8(header);
        Script { w }
    }
    pub fn bytes(&mut self, slot: u8, bytes: &[u8]) -> &mut Script {
        self.w.u8(0).u8(slot).chunk(bytes);
        self
    }
    pub fn eof(&mut self, slot: u8) -> &mut Script {
        self.w.u8(2).u8(slot);
        self
    }
    pub fn advance_secs(&mut self, secs: u16) -> &mut Script {
        self.w.u8(4).u8(0).u8(3).u16(secs);
        self
    }
    pub fn health(&mut self, h: u8) -> &mut Script {
        self.w.u8(5).u8(0).u8(h);
        self
    }
    pub fn synced(&mut self, ok: bool) -> &mut Script {
        self.w.u8(6).u8(0).u8(if ok { 0 } else { 1 });
        self
    }
    pub fn fault(&mut self, slot: u8, partial: bool) -> &mut Script {
        self.w.u8(8).u8(slot).u8(u8::from(partial));
        self
    }
    pub fn shutdown(&mut self) -> &mut Script {
        self.w.u8(9).u8(0);
        self
    }
    pub fn connect(&mut self, slot: u8) -> &mut Script {
        self.w.u8(11).u8(slot);
        self
    }
    /// A raw op (templates, forwarding), for hand-made seeds.
    pub fn raw(&mut self, bytes: &[u8]) -> &mut Script {
        self.w.bytes.extend_from_slice(bytes);
        self
    }
    pub fn finish(&mut self) -> Vec<u8> {
        self.w.finish()
    }
}

/// Every transcript of `protocol/hub/transcripts.json` as an input (its connections as slots,
/// its faults and clock as ops, its expectations dropped), once per header variant that
/// matters, plus a few template-driven sessions.
pub fn seeds(root: &Path) -> Vec<(String, Vec<u8>)> {
    let path = root.join("protocol/hub/transcripts.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file: Value = serde_json::from_str(&text).expect("transcripts.json is JSON");
    let roster: Vec<(String, String)> = file["roster"]
        .as_object()
        .expect("a roster")
        .iter()
        .map(|(n, t)| (n.clone(), t.as_str().expect("a token").to_owned()))
        .collect();
    let mut ours: Vec<(String, String)> = AGENTS
        .iter()
        .map(|(n, t)| ((*n).to_owned(), (*t).to_owned()))
        .collect();
    ours.sort();
    let mut theirs = roster;
    theirs.sort();
    assert_eq!(theirs, ours, "AGENTS must be the transcripts' roster");
    let mut out = Vec::new();
    for t in file["transcripts"].as_array().expect("transcripts") {
        let name = t["name"].as_str().expect("a name");
        for (suffix, header) in [("", 0u8), ("-durable", H_FLUSHER | H_TIGHT)] {
            let mut s = Script::new(header);
            let mut slots: Vec<String> = Vec::new();
            let mut slot = |c: &Value| -> u8 {
                let c = c.as_str().unwrap_or("a").to_owned();
                let i = slots.iter().position(|x| *x == c).unwrap_or_else(|| {
                    slots.push(c);
                    slots.len() - 1
                });
                (i % SLOTS) as u8
            };
            for step in t["steps"].as_array().expect("steps") {
                if let Some(lines) = step["send"].as_array() {
                    let mut bytes = Vec::new();
                    for l in lines {
                        bytes.extend_from_slice(l.as_str().unwrap_or("").as_bytes());
                        bytes.push(b'\n');
                    }
                    s.bytes(slot(&step["conn"]), &bytes);
                } else if let Some(hex) = step["send_hex"].as_str() {
                    let bytes: Vec<u8> = (0..hex.len() / 2)
                        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex"))
                        .collect();
                    s.bytes(slot(&step["conn"]), &bytes);
                } else if let Some(f) = step.get("send_filler") {
                    let n = f["count"].as_u64().unwrap_or(0) as usize;
                    let n = (n + MAX_LINE_BYTES).saturating_sub(EXAMPLE_LINE_BYTES);
                    let b = f["byte"].as_str().unwrap_or("x").as_bytes()[0];
                    s.bytes(slot(&step["conn"]), &vec![b; n]);
                } else if let Some(p) = step.get("send_padded") {
                    let want = p["line_bytes"].as_u64().unwrap_or(0) as usize;
                    let want = (want + MAX_LINE_BYTES).saturating_sub(EXAMPLE_LINE_BYTES);
                    let pad_line = p["pad_line"].as_u64().unwrap_or(0) as usize;
                    let mut bytes = Vec::new();
                    for (i, l) in p["lines"].as_array().expect("lines").iter().enumerate() {
                        let l = l.as_str().unwrap_or("");
                        let l = if i == pad_line {
                            let pad = (want + 4).saturating_sub(l.len());
                            l.replace("$PAD", &"x".repeat(pad))
                        } else {
                            l.to_owned()
                        };
                        bytes.extend_from_slice(l.as_bytes());
                        bytes.push(b'\n');
                    }
                    s.bytes(slot(&step["conn"]), &bytes);
                } else if step.get("close").is_some() {
                    s.eof(slot(&step["conn"]));
                } else if step.get("connect").is_some() {
                    s.connect(slot(&step["conn"]));
                } else if let Some(secs) = step["advance_secs"].as_u64() {
                    s.advance_secs(secs as u16);
                } else if let Some(f) = step["fault"].as_str() {
                    match f {
                        "audit_write_fails" => {
                            s.health(1);
                        }
                        "delivery_zero_bytes" => {
                            s.fault(slot(&step["conn"]), false);
                        }
                        _ => {
                            s.fault(slot(&step["conn"]), true);
                        }
                    }
                } else if step.get("shutdown").is_some() {
                    s.shutdown();
                } else if header & H_FLUSHER != 0 && step.get("expect").is_some() {
                    // The store's flush completes before each expectation.
                    s.synced(true);
                }
            }
            out.push((format!("transcript-{name}{suffix}"), s.finish()));
        }
    }
    // Forwarding: a local send to name@mini, the link up, the peer's ack; a peer's envelope
    // for a local agent, awaited.
    // Ops: [1, slot, 0, agent] logs in; [1, slot, 1, id, to, kind, corr, len, body] sends;
    // [1, slot, 2, flags, replyTo, kind, timeout] awaits; [10, slot, sub, ...] is the peer.
    let login = |agent: u8| [1u8, 0, 0, agent];
    let mut s = Script::new(H_FORWARD);
    s.raw(&login(0))
        .raw(&[1, 0, 1, 3, 3, 0, 0])
        .raw(&2u16.to_le_bytes())
        .raw(b"{}");
    s.raw(&[10, 0, 0]).raw(&[10, 0, 3, 0]);
    s.raw(&login(1))
        .raw(&[1, 0, 2, 0, 0, 0, 0])
        .raw(&[10, 0, 2, 0, 1, 1]);
    out.push(("forwarding".to_owned(), s.finish()));
    out
}
