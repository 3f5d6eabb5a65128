//! Checks the language-neutral fixtures in `protocol/hub/` (format: `protocol/README.md`)
//! against this implementation: every line case through `ClientLine::decode` /
//! `HubLine::decode` and back through `encode` (SPEC §2–§3), and every transcript replayed
//! against the sans-IO hub core on a virtual clock (SPEC §4–§5, §8.1).
//!
//! Refuses: sockets and real time. The transcripts are written so that a socket-level test
//! can replay them against the real server too; here a small in-memory IO layer stands in,
//! built the way `server` drives the core (lines through `LineBuffer`, outputs drained in
//! order, staged sends committed after each input).
//!
//! A wrong fixture fails the test: every case is checked in full, and all failures of a file
//! are reported together.

use agent_hub_host::config::Config;
use agent_hub_proto::hub::durable::StoreFailure;
use agent_hub_proto::hub::{ConnId, Hub, Output};
use agent_hub_proto::kernel::now::Now;
use agent_hub_proto::roster::Roster;
use agent_hub_proto::wire::{ClientLine, HubLine, LineBuffer};
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

// ----- loading -----

fn protocol_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("protocol")
        .join("hub")
}

fn load<T: for<'de> Deserialize<'de>>(file: &str) -> T {
    let path = protocol_dir().join(file);
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not a valid fixture file: {e}", path.display()))
}

/// One line case. Unknown keys are refused so a misspelt key cannot silently skip a check.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LineCase {
    name: String,
    spec: String,
    line: Option<String>,
    line_hex: Option<String>,
    valid: bool,
    tag: Option<String>,
    fields: Option<Map<String, Value>>,
    canonical: Option<String>,
    error: Option<String>,
    #[allow(dead_code)]
    note: Option<String>,
}

impl LineCase {
    fn bytes(&self) -> Result<Vec<u8>, String> {
        match (&self.line, &self.line_hex) {
            (Some(line), None) => Ok(line.as_bytes().to_vec()),
            (None, Some(hex)) => from_hex(hex),
            _ => Err("exactly one of line and line_hex must be given".into()),
        }
    }

    /// Structural rules of the format itself (protocol/README.md).
    fn check_shape(&self) -> Result<(), String> {
        if !self.spec.starts_with('§') {
            return Err(format!(
                "spec {:?} must cite a SPEC section (§n.m)",
                self.spec
            ));
        }
        let bytes = self.bytes()?;
        if bytes.contains(&b'\n') {
            return Err("a line never contains a newline".into());
        }
        if self.valid {
            if self.tag.is_none() || self.fields.is_none() || self.error.is_some() {
                return Err("a valid case has tag and fields, and no error".into());
            }
        } else if self.error.is_none()
            || self.tag.is_some()
            || self.fields.is_some()
            || self.canonical.is_some()
        {
            return Err("an invalid case has error, and no tag, fields or canonical".into());
        }
        if let (Some(canonical), Some(line)) = (&self.canonical, &self.line) {
            if canonical == line {
                return Err("canonical equals line: drop it".into());
            }
        }
        Ok(())
    }
}

fn from_hex(hex: &str) -> Result<Vec<u8>, String> {
    if hex.len() % 2 != 0 {
        return Err(format!("odd-length hex {hex:?}"));
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| {
            u8::from_str_radix(&hex[i..i + 2], 16).map_err(|e| format!("bad hex {hex:?}: {e}"))
        })
        .collect()
}

fn check_all(file: &str, cases: &[LineCase], check: impl Fn(&LineCase) -> Result<(), String>) {
    let mut names = BTreeSet::new();
    let mut failures = Vec::new();
    for case in cases {
        if !names.insert(case.name.as_str()) {
            failures.push(format!("{}: duplicate name", case.name));
        }
        if let Err(why) = case.check_shape().and_then(|()| check(case)) {
            failures.push(format!("{} ({}): {why}", case.name, case.spec));
        }
    }
    assert!(
        cases.len() >= 10,
        "{file}: suspiciously few cases ({})",
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "{file}: {} failing case(s):\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
}

/// The canonical re-encoding of a valid case, which must itself round-trip unchanged.
fn expected_encoding(case: &LineCase) -> String {
    case.canonical
        .clone()
        .or_else(|| case.line.clone())
        .unwrap_or_default()
}

fn compare_fields(case: &LineCase, tag: &str, fields: Map<String, Value>) -> Result<(), String> {
    if Some(tag) != case.tag.as_deref() {
        return Err(format!("decoded tag {tag:?}, fixture says {:?}", case.tag));
    }
    let want = case.fields.as_ref().expect("checked by check_shape");
    if *want != fields {
        return Err(format!(
            "decoded fields\n    {}\n  fixture says\n    {}",
            Value::Object(fields),
            Value::Object(want.clone())
        ));
    }
    Ok(())
}

fn envelope_fields(
    id: &str,
    from: &str,
    to: &str,
    ts: &str,
    kind: &str,
    correlation_id: Option<&str>,
    body_raw: &str,
) -> Map<String, Value> {
    let v = json!({
        "id": id, "from": from, "to": to, "ts": ts, "kind": kind,
        "correlationId": correlation_id, "body_raw": body_raw,
    });
    match v {
        Value::Object(m) => m,
        _ => unreachable!("json! of an object literal"),
    }
}

// ----- client → hub lines (SPEC §2, §3, §4.1, §5.2) -----

fn client_fields(line: &ClientLine) -> (&'static str, Map<String, Value>) {
    let v = match line {
        ClientLine::Hello(h) => {
            let mut v = json!({"name": h.name, "token": h.token});
            if let Some(warn) = h.warn {
                v["warn"] = json!(warn);
            }
            v
        }
        ClientLine::Send(e) => Value::Object(envelope_fields(
            &e.id,
            &e.from,
            &e.to,
            &e.ts,
            &e.kind,
            e.correlation_id.as_deref(),
            e.body.get(),
        )),
        ClientLine::Await(a) => {
            let mut v =
                json!({"replyTo": a.reply_to, "kind": a.kind, "timeoutSecs": a.timeout_secs});
            if let Some(ack) = a.ack {
                v["ack"] = json!(ack);
            }
            if let Some(reader) = &a.reader {
                v["reader"] = json!(reader);
            }
            v
        }
        ClientLine::Ack(r) => json!({"id": r.id}),
        ClientLine::Status(r) => {
            let mut v = json!({"id": r.id});
            if let Some(w) = &r.wait_for {
                v["waitFor"] = json!(w);
            }
            if let Some(ms) = r.timeout_ms {
                v["timeoutMs"] = json!(ms);
            }
            v
        }
        ClientLine::Who(r) => match r.off_roster {
            Some(b) => json!({"offRoster": b}),
            None => json!({}),
        },
        ClientLine::Tasks | ClientLine::Activity => json!({}),
        ClientLine::Delegate(d) => {
            let mut v = json!({
                "agent": d.agent, "cwd": d.cwd, "prompt": d.prompt,
                "timeoutSecs": d.timeout_secs, "progressSecs": d.progress_secs, "peer": d.peer,
            });
            // Issue 37's and 38's keys only when the line has them (absent or null: no field).
            if let Some(k) = d.keep_secs {
                v["keepSecs"] = json!(k);
            }
            if let Some(p) = d.permission {
                v["permission"] = json!(p.as_str());
            }
            if let Some(rules) = &d.allow {
                v["allow"] = serde_json::to_value(rules).expect("rules are plain data");
            }
            v
        }
        ClientLine::TaskStatus(r) | ClientLine::Cancel(r) | ClientLine::TaskClose(r) => {
            json!({"task": r.task})
        }
        ClientLine::TaskPrompt(p) => {
            let mut v = json!({"task": p.task, "prompt": p.prompt});
            if let Some(i) = p.interrupt {
                v["interrupt"] = json!(i);
            }
            v
        }
        ClientLine::TaskAnswer(a) => json!({
            "task": a.task, "request": a.request, "option": a.option, "message": a.message,
        }),
        // The input's JSON text as the line carries it, as an envelope's `body_raw`.
        ClientLine::TaskPermission(p) => json!({
            "toolName": p.tool_name, "toolUseId": p.tool_use_id, "input_raw": p.input(),
        }),
        // The payload's own encoding, keys as the line carries them (lease design §0).
        ClientLine::Lease(r) => serde_json::from_str(&r.payload_json()).expect("a JSON object"),
        ClientLine::Turn(t) => {
            let mut v = json!({"state": t.state});
            if let Some(pid) = t.pid {
                v["pid"] = json!(pid);
            }
            if let Some(start) = t.start {
                v["start"] = json!(start);
            }
            v
        }
    };
    match v {
        Value::Object(m) => (line.tag(), m),
        _ => unreachable!("every arm builds an object"),
    }
}

fn check_client_case(case: &LineCase) -> Result<(), String> {
    let bytes = case.bytes()?;
    let decoded = ClientLine::decode(&bytes);
    match (case.valid, decoded) {
        (true, Err(e)) => Err(format!("fixture says valid, decoder says: {e}")),
        (false, Ok(line)) => Err(format!(
            "fixture says invalid, decoder accepted it as {}",
            line.tag()
        )),
        (false, Err(e)) => {
            let want = case.error.as_deref().expect("checked by check_shape");
            if e.to_string() != want {
                return Err(format!("error text\n    {e}\n  fixture says\n    {want}"));
            }
            // The text travels to the client in an error line and must survive it unchanged.
            let line = HubLine::Error {
                message: want.to_owned(),
            }
            .encode();
            match HubLine::decode(line.trim_end_matches('\n').as_bytes()) {
                Ok(HubLine::Error { message }) if message == want => Ok(()),
                other => Err(format!(
                    "error line {line:?} does not round-trip: {other:?}"
                )),
            }
        }
        (true, Ok(line)) => {
            let (tag, fields) = client_fields(&line);
            compare_fields(case, tag, fields)?;
            let want = expected_encoding(case);
            let got = line.encode();
            let got = got
                .strip_suffix('\n')
                .ok_or("encode() must end with a newline")?;
            if got != want {
                return Err(format!("re-encoded as\n    {got}\n  expected\n    {want}"));
            }
            // The canonical form is a fixed point.
            let again = ClientLine::decode(want.as_bytes())
                .map_err(|e| format!("canonical form does not decode: {e}"))?;
            if again.encode().trim_end_matches('\n') != want {
                return Err("canonical form does not re-encode to itself".into());
            }
            Ok(())
        }
    }
}

#[test]
fn client_lines_decode_and_round_trip() {
    let cases: Vec<LineCase> = load("client-lines.json");
    check_all("client-lines.json", &cases, check_client_case);
}

/// The lease verbs (lease design §0, SPEC §17), in their own file.
#[test]
fn lease_client_lines_decode_and_round_trip() {
    let cases: Vec<LineCase> = load("lease-client-lines.json");
    check_all("lease-client-lines.json", &cases, check_client_case);
}

// ----- hub → client lines (SPEC §2, §4, §5) -----

/// The envelope text of a hub line, read back into its fields.
#[derive(Deserialize)]
struct EnvelopeText<'a> {
    id: String,
    from: String,
    to: String,
    ts: String,
    kind: String,
    #[serde(rename = "correlationId")]
    correlation_id: Option<String>,
    #[serde(borrow)]
    body: &'a RawValue,
}

fn hub_fields(line: &HubLine) -> Result<(&'static str, Map<String, Value>), String> {
    let (tag, v) = match line {
        HubLine::Ok => ("ok", json!({})),
        HubLine::Timeout => ("timeout", json!({})),
        HubLine::Error { message } => ("error", json!({"message": message})),
        HubLine::Accepted { id, warning } => {
            let mut v = json!({"id": id});
            if let Some(w) = warning {
                v["warning"] = json!(w);
            }
            ("accepted", v)
        }
        HubLine::Acked { id } => ("acked", json!({"id": id})),
        HubLine::Status(st) => (
            "status",
            serde_json::to_value(st).map_err(|e| e.to_string())?,
        ),
        HubLine::Who(p) => ("who", serde_json::to_value(p).map_err(|e| e.to_string())?),
        HubLine::Delegated(r) => (
            "delegated",
            serde_json::to_value(r).map_err(|e| e.to_string())?,
        ),
        HubLine::Cancel(r) => (
            "cancel",
            serde_json::to_value(r).map_err(|e| e.to_string())?,
        ),
        HubLine::TaskAnswer(r) => (
            "task_answer",
            serde_json::to_value(r).map_err(|e| e.to_string())?,
        ),
        HubLine::TaskPrompt(r) => (
            "task_prompt",
            serde_json::to_value(r).map_err(|e| e.to_string())?,
        ),
        HubLine::TaskClose(r) => (
            "task_close",
            serde_json::to_value(r).map_err(|e| e.to_string())?,
        ),
        HubLine::TaskPermission(r) => (
            "task_permission",
            serde_json::to_value(r).map_err(|e| e.to_string())?,
        ),
        HubLine::TaskStatus(r) => (
            "task_status",
            serde_json::to_value(r).map_err(|e| e.to_string())?,
        ),
        HubLine::Tasks(l) => ("tasks", serde_json::to_value(l).map_err(|e| e.to_string())?),
        HubLine::Turn(r) => ("turn", serde_json::to_value(r).map_err(|e| e.to_string())?),
        HubLine::Lease(r) => (
            r.tag(),
            serde_json::from_str(&r.payload_json()).map_err(|e| e.to_string())?,
        ),
        HubLine::Activity(a) => (
            "activity",
            serde_json::to_value(a).map_err(|e| e.to_string())?,
        ),
        HubLine::Envelope(text) => {
            let e: EnvelopeText<'_> = serde_json::from_str(text)
                .map_err(|e| format!("decoded envelope text does not parse: {e}"))?;
            let m = envelope_fields(
                &e.id,
                &e.from,
                &e.to,
                &e.ts,
                &e.kind,
                e.correlation_id.as_deref(),
                e.body.get(),
            );
            return Ok(("envelope", m));
        }
    };
    match v {
        Value::Object(m) => Ok((tag, m)),
        _ => unreachable!("every arm builds an object"),
    }
}

fn check_hub_case(case: &LineCase) -> Result<(), String> {
    let bytes = case.bytes()?;
    match (case.valid, HubLine::decode(&bytes)) {
        (true, Err(e)) => Err(format!("fixture says valid, decoder says: {e}")),
        (false, Ok(line)) => Err(format!("fixture says invalid, decoder accepted {line:?}")),
        (false, Err(e)) => {
            let want = case.error.as_deref().expect("checked by check_shape");
            if e.to_string() == want {
                Ok(())
            } else {
                Err(format!("error text\n    {e}\n  fixture says\n    {want}"))
            }
        }
        (true, Ok(line)) => {
            let (tag, fields) = hub_fields(&line)?;
            compare_fields(case, tag, fields)?;
            let want = expected_encoding(case);
            let got = line.encode();
            let got = got
                .strip_suffix('\n')
                .ok_or("encode() must end with a newline")?;
            if got != want {
                return Err(format!("re-encoded as\n    {got}\n  expected\n    {want}"));
            }
            match HubLine::decode(want.as_bytes()) {
                Ok(again) if again == line => Ok(()),
                other => Err(format!(
                    "canonical form does not decode to the same line: {other:?}"
                )),
            }
        }
    }
}

#[test]
fn hub_lines_decode_and_round_trip() {
    let cases: Vec<LineCase> = load("hub-lines.json");
    check_all("hub-lines.json", &cases, check_hub_case);
}

/// The lease replies (lease design §0, SPEC §17), in their own file.
#[test]
fn lease_hub_lines_decode_and_round_trip() {
    let cases: Vec<LineCase> = load("lease-hub-lines.json");
    check_all("lease-hub-lines.json", &cases, check_hub_case);
}

// ----- transcripts (SPEC §4, §5, §8.1) -----

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TranscriptFile {
    roster: BTreeMap<String, String>,
    limits: String,
    transcripts: Vec<Transcript>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Transcript {
    name: String,
    spec: Vec<String>,
    #[serde(default)]
    needs: Vec<String>,
    #[allow(dead_code)]
    note: Option<String>,
    steps: Vec<Step>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Filler {
    byte: String,
    count: usize,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Padded {
    lines: Vec<String>,
    pad_line: usize,
    line_bytes: usize,
}

/// One step; exactly one action key is set (checked in `Step::action`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Step {
    conn: Option<String>,
    connect: Option<bool>,
    send: Option<Vec<String>>,
    send_hex: Option<String>,
    send_filler: Option<Filler>,
    send_padded: Option<Padded>,
    close: Option<bool>,
    expect: Option<Vec<String>>,
    then: Option<String>,
    advance_secs: Option<u64>,
    fault: Option<String>,
    shutdown: Option<bool>,
}

enum Action {
    Connect(String),
    Write(String, Vec<u8>),
    Close(String),
    Expect {
        conn: String,
        lines: Vec<String>,
        then: Then,
    },
    Advance(Duration),
    Fault(Option<String>, Fault),
    Shutdown,
}

/// What the connection is after an `expect` (protocol/README.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Then {
    /// The hub keeps it open and the exchange goes on.
    Open,
    /// The hub sent its final line and waits only for the client's close (SPEC §4.3).
    Answered,
    /// The hub closed it.
    Closed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    /// The reader's socket takes no byte of the next delivery.
    DeliveryZeroBytes,
    /// The reader's socket takes part of the next delivery, then fails.
    DeliveryPartial,
    /// The next audit write fails.
    AuditWriteFails,
}

impl Step {
    fn action(&self) -> Result<Action, String> {
        let conn = || {
            self.conn
                .clone()
                .ok_or_else(|| "this step needs conn".to_owned())
        };
        let mut actions = Vec::new();
        if self.connect == Some(true) {
            actions.push(Action::Connect(conn()?));
        }
        if let Some(lines) = &self.send {
            let mut bytes = Vec::new();
            for l in lines {
                if l.contains('\n') {
                    return Err(format!("a sent line contains a newline: {l:?}"));
                }
                bytes.extend_from_slice(l.as_bytes());
                bytes.push(b'\n');
            }
            actions.push(Action::Write(conn()?, bytes));
        }
        if let Some(hex) = &self.send_hex {
            actions.push(Action::Write(conn()?, from_hex(hex)?));
        }
        if let Some(f) = &self.send_filler {
            let [b] = f.byte.as_bytes() else {
                return Err("send_filler.byte must be one byte".into());
            };
            actions.push(Action::Write(conn()?, vec![*b; f.count]));
        }
        if let Some(p) = &self.send_padded {
            let mut bytes = Vec::new();
            for (i, l) in p.lines.iter().enumerate() {
                let line = if i == p.pad_line {
                    let fill = p
                        .line_bytes
                        .checked_sub(l.len() - "$PAD".len())
                        .ok_or("line longer than line_bytes")?;
                    l.replacen("$PAD", &"x".repeat(fill), 1)
                } else {
                    l.clone()
                };
                if i == p.pad_line && line.len() != p.line_bytes {
                    return Err("pad_line has no $PAD".into());
                }
                bytes.extend_from_slice(line.as_bytes());
                bytes.push(b'\n');
            }
            actions.push(Action::Write(conn()?, bytes));
        }
        if self.close == Some(true) {
            actions.push(Action::Close(conn()?));
        }
        if let Some(lines) = &self.expect {
            let then = match self.then.as_deref() {
                Some("closed") => Then::Closed,
                Some("answered") => Then::Answered,
                Some("open") => Then::Open,
                other => {
                    return Err(format!(
                        "expect needs then = \"open\", \"answered\" or \"closed\", got {other:?}"
                    ))
                }
            };
            actions.push(Action::Expect {
                conn: conn()?,
                lines: lines.clone(),
                then,
            });
        } else if self.then.is_some() {
            return Err("then without expect".into());
        }
        if let Some(secs) = self.advance_secs {
            actions.push(Action::Advance(Duration::from_secs(secs)));
        }
        if let Some(f) = &self.fault {
            let fault = match f.as_str() {
                "delivery_zero_bytes" => Fault::DeliveryZeroBytes,
                "delivery_partial" => Fault::DeliveryPartial,
                "audit_write_fails" => Fault::AuditWriteFails,
                other => return Err(format!("unknown fault {other:?}")),
            };
            actions.push(Action::Fault(self.conn.clone(), fault));
        }
        if self.shutdown == Some(true) {
            actions.push(Action::Shutdown);
        }
        match actions.len() {
            1 => Ok(actions.pop().expect("len is 1")),
            n => Err(format!("a step has exactly one action, this one has {n}")),
        }
    }
}

/// A client connection as the simulated IO layer sees it.
#[derive(Default)]
struct SimConn {
    id: ConnId,
    input: LineBuffer,
    /// Lines the hub wrote that the transcript has not yet expected.
    received: Vec<String>,
    /// The hub asked for the connection to be closed.
    closed: bool,
    /// The hub sent its final line (`Output::Answered`) and waits for the client's close.
    answered: bool,
    /// The socket took every byte written to it.
    flushed: bool,
    /// A write to the socket failed: the IO layer releases it, whether or not the hub asked
    /// for a close (an ack-mode delivery does not; SPEC §12.2).
    broken: bool,
    fault: Option<Fault>,
}

/// The in-memory IO layer: it moves bytes between the transcript and the core the way the
/// server does, on a virtual clock.
struct Sim {
    hub: Hub,
    max_line_bytes: usize,
    conns: HashMap<String, SimConn>,
    by_id: HashMap<ConnId, String>,
    next_id: ConnId,
    now: Now,
    audit_fails: bool,
    /// Batches fail at their audit write (during one commit point of `pump`).
    batch_fails: bool,
    /// Delivery faults armed for connections not yet opened.
    armed: HashMap<String, Fault>,
    /// Strings that must never reach the service log (SPEC §8.2).
    secrets: Vec<String>,
    log_leaks: Vec<String>,
}

impl Sim {
    fn new(file: &TranscriptFile) -> Sim {
        let roster_text: String = std::iter::once("[agents]\n".to_owned())
            .chain(
                file.roster
                    .iter()
                    .map(|(n, t)| format!("{n} = {}\n", Value::String(t.clone()))),
            )
            .collect();
        let roster = Roster::parse(&roster_text).expect("the transcript roster is valid");
        let config_path = Path::new(env!("CARGO_MANIFEST_DIR")).join(&file.limits);
        let config =
            Config::load(&config_path).expect("the limits file named by transcripts.json loads");
        let mut secrets: Vec<String> = file.roster.values().cloned().collect();
        secrets.push("body-canary".to_owned());
        Sim {
            max_line_bytes: config.limits.max_line_bytes,
            hub: Hub::new(
                roster,
                config.limits,
                Box::new(agent_hub_proto::kernel::ids::SeededIds::new(0)),
            ),
            conns: HashMap::new(),
            by_id: HashMap::new(),
            next_id: 1,
            now: Now {
                mono: Instant::now(),
                wall: chrono::Utc::now(),
            },
            audit_fails: false,
            batch_fails: false,
            armed: HashMap::new(),
            secrets,
            log_leaks: Vec::new(),
        }
    }

    fn conn(&mut self, name: &str) -> &mut SimConn {
        if !self.conns.contains_key(name) {
            let id = self.next_id;
            self.next_id += 1;
            let fault = self.armed.remove(name);
            self.conns.insert(
                name.to_owned(),
                SimConn {
                    id,
                    flushed: true,
                    fault,
                    ..SimConn::default()
                },
            );
            self.by_id.insert(id, name.to_owned());
            self.hub.handle_connect(id, self.now);
            self.pump();
        }
        self.conns.get_mut(name).expect("inserted above")
    }

    fn write(&mut self, name: &str, bytes: &[u8]) -> Result<(), String> {
        let c = self.conn(name);
        if c.closed {
            return Err(format!(
                "{name}: the transcript writes to a connection the hub closed"
            ));
        }
        let id = c.id;
        c.input.push(bytes);
        loop {
            let c = self.conns.get_mut(name).expect("exists");
            if c.closed {
                break; // the server discards input after a close
            }
            match c.input.next_line(self.max_line_bytes) {
                Ok(Some(line)) => {
                    let line = line.to_vec();
                    self.hub.handle_line(id, &line, self.now);
                }
                Ok(None) => break,
                Err(too_long) => {
                    c.input = LineBuffer::new();
                    self.hub
                        .handle_bad_input(id, &too_long.to_string(), self.now);
                }
            }
            self.drain();
        }
        self.pump();
        Ok(())
    }

    /// Drains outputs, running the core's commit point (as each loop iteration does) until
    /// nothing waits for a batch. An armed audit fault fails every batch of one commit point.
    fn pump(&mut self) {
        loop {
            self.drain();
            if !self.hub.has_commit_work() {
                break;
            }
            self.batch_fails = std::mem::take(&mut self.audit_fails);
            self.hub.handle_timeout(self.now);
            self.hub.handle_commit_point(self.now, false);
            self.drain();
            self.batch_fails = false;
        }
    }

    fn drain(&mut self) {
        loop {
            self.drain_outputs();
            // As the server does: a socket whose write failed is released, and the core hears
            // of it, even when no Close was asked for (an ack-mode delivery waits for an ack).
            let broken: Vec<ConnId> = self
                .conns
                .values()
                .filter(|c| c.broken && !c.closed)
                .map(|c| c.id)
                .collect();
            if broken.is_empty() {
                break;
            }
            for id in broken {
                self.by_id(id).closed = true;
                self.hub.handle_closed(
                    id,
                    false,
                    "write failed: Connection reset by peer (os error 104)",
                    self.now,
                );
            }
        }
    }

    fn drain_outputs(&mut self) {
        while let Some(out) = self.hub.poll_output() {
            match out {
                Output::Write { conn, line } => {
                    let c = self.by_id(conn);
                    assert!(
                        !c.closed,
                        "the hub wrote {line:?} after closing the connection"
                    );
                    c.received.push(
                        line.strip_suffix('\n')
                            .expect("lines end with a newline")
                            .to_owned(),
                    );
                }
                Output::Handoff { conn, line } => {
                    let c = self.by_id(conn);
                    assert!(!c.closed, "the hub delivered after closing the connection");
                    match c.fault.take() {
                        None => {
                            c.received.push(
                                line.strip_suffix('\n')
                                    .expect("lines end with a newline")
                                    .to_owned(),
                            );
                            self.hub.handle_delivery_committed(conn, self.now);
                        }
                        Some(Fault::DeliveryZeroBytes) => {
                            c.flushed = false;
                            c.broken = true;
                        }
                        Some(Fault::DeliveryPartial) => {
                            c.flushed = false;
                            c.broken = true;
                            self.hub.handle_delivery_committed(conn, self.now);
                        }
                        Some(Fault::AuditWriteFails) => unreachable!("not a connection fault"),
                    }
                }
                Output::Answered { conn } => {
                    let c = self.by_id(conn);
                    assert!(!c.closed, "the hub answered after closing the connection");
                    c.answered = true;
                }
                Output::Close { conn, .. } => {
                    let c = self.by_id(conn);
                    c.closed = true;
                    let flushed = c.flushed;
                    let reason = if flushed {
                        "closed"
                    } else {
                        "write failed: Connection reset by peer (os error 104)"
                    };
                    self.hub.handle_closed(conn, flushed, reason, self.now);
                }
                Output::Audit(_) => {}
                // The loop writes the batch (the replayer runs an in-memory hub: only its audit
                // records matter) and reports back.
                Output::Commit(batch) => {
                    let result = if self.batch_fails {
                        Err("the audit log could not be written (No space left on device (os error 28))"
                            .to_owned())
                    } else {
                        Ok(())
                    };
                    self.hub.handle_committed(
                        batch.id,
                        result.map_err(StoreFailure::new),
                        self.now,
                    );
                }
                Output::LogError(line) => {
                    if self.secrets.iter().any(|s| line.contains(s.as_str())) {
                        self.log_leaks.push(line);
                    }
                }
                // Nor does it forward: no relay is configured.
                Output::Forward { .. } | Output::ForwardAck { .. } => {
                    unreachable!("no forwarding peers")
                }
                // Nor does it run tasks: no `[tasks]` table.
                Output::StartTask(_)
                | Output::CancelTask { .. }
                | Output::AnswerTask { .. }
                | Output::PromptTask { .. }
                | Output::CloseTask { .. }
                | Output::KillOrphan { .. }
                | Output::ToPeer(_) => {
                    unreachable!("no tasks are configured")
                }
                // No transcript reports a turn with a pid: no process is ever watched.
                Output::CheckProcesses(_) => unreachable!("no process is watched"),
                Output::Log(line) => {
                    if self.secrets.iter().any(|s| line.contains(s.as_str())) {
                        self.log_leaks.push(line);
                    }
                }
            }
        }
    }

    fn by_id(&mut self, id: ConnId) -> &mut SimConn {
        let name = &self.by_id[&id];
        self.conns.get_mut(name).expect("every id has a connection")
    }

    fn advance(&mut self, d: Duration) {
        self.now = Now {
            mono: self.now.mono + d,
            wall: self.now.wall + d,
        };
        self.hub.handle_timeout(self.now);
        self.pump();
    }

    fn run(&mut self, action: Action) -> Result<(), String> {
        match action {
            Action::Connect(name) => {
                self.conn(&name);
            }
            Action::Write(name, bytes) => self.write(&name, &bytes)?,
            Action::Close(name) => {
                let c = self.conn(&name);
                let id = c.id;
                if c.answered && !c.closed {
                    // Answered: the server releases the socket at the client's close.
                    c.closed = true;
                    let flushed = c.flushed;
                    self.hub.handle_closed(id, flushed, "closed", self.now);
                } else {
                    self.hub.handle_eof(id, self.now);
                }
                self.pump();
            }
            Action::Expect { conn, lines, then } => {
                let c = self.conn(&conn);
                let got = std::mem::take(&mut c.received);
                if got.len() != lines.len() || !got.iter().zip(&lines).all(|(g, p)| matches(p, g)) {
                    return Err(format!(
                        "{conn}: the hub sent\n      {}\n    expected\n      {}",
                        got.join("\n      "),
                        lines.join("\n      ")
                    ));
                }
                let state = match (c.closed, c.answered) {
                    (true, _) => Then::Closed,
                    (false, true) => Then::Answered,
                    (false, false) => Then::Open,
                };
                if state != then {
                    return Err(format!(
                        "{conn}: connection is {state:?}, expected {then:?}"
                    ));
                }
            }
            Action::Advance(d) => self.advance(d),
            Action::Fault(None, Fault::AuditWriteFails) => self.audit_fails = true,
            Action::Fault(Some(name), f @ (Fault::DeliveryZeroBytes | Fault::DeliveryPartial)) => {
                match self.conns.get_mut(&name) {
                    Some(c) => c.fault = Some(f),
                    // Armed before the connection opens: it applies once it does.
                    None => drop(self.armed.insert(name, f)),
                }
            }
            Action::Fault(..) => {
                return Err("delivery faults need conn; audit_write_fails takes none".into())
            }
            Action::Shutdown => {
                self.hub.shutdown(self.now);
                self.pump();
            }
        }
        Ok(())
    }

    fn finish(&self) -> Result<(), String> {
        for (name, c) in &self.conns {
            if !c.received.is_empty() {
                return Err(format!("{name}: lines never expected: {:?}", c.received));
            }
        }
        if !self.log_leaks.is_empty() {
            return Err(format!(
                "service log holds a token or body: {:?}",
                self.log_leaks
            ));
        }
        Ok(())
    }
}

/// Matches a hub line against a pattern: literal text, except that `$ID` (a non-empty JSON
/// string content), `$TS` (an RFC 3339 timestamp) and `$TEXT` (any JSON string content) stand
/// for part of a JSON string.
fn matches(pattern: &str, text: &str) -> bool {
    const HOLES: [&str; 3] = ["$ID", "$TS", "$TEXT"];
    let next_hole = HOLES
        .iter()
        .filter_map(|h| pattern.find(h).map(|at| (at, *h)))
        .min();
    let Some((at, hole)) = next_hole else {
        return pattern == text;
    };
    let (lit, rest) = (&pattern[..at], &pattern[at + hole.len()..]);
    let Some(text) = text.strip_prefix(lit) else {
        return false;
    };
    // The hole ends where its JSON string ends (at an unescaped quote) or earlier.
    let mut end = 0;
    let bytes = text.as_bytes();
    while end < bytes.len() && bytes[end] != b'"' {
        end += if bytes[end] == b'\\' { 2 } else { 1 };
    }
    let end = end.min(bytes.len());
    (0..=end).filter(|&i| text.is_char_boundary(i)).any(|i| {
        let filled = &text[..i];
        let ok = match hole {
            "$ID" => !filled.is_empty(),
            "$TS" => chrono::DateTime::parse_from_rfc3339(filled).is_ok(),
            _ => true,
        };
        ok && matches(rest, &text[i..])
    })
}

#[test]
fn transcripts_replay_against_the_core() {
    let file: TranscriptFile = load("transcripts.json");
    assert!(file.transcripts.len() >= 10, "suspiciously few transcripts");
    let mut names = BTreeSet::new();
    let mut failures = Vec::new();
    for t in &file.transcripts {
        if !names.insert(t.name.as_str()) {
            failures.push(format!("{}: duplicate name", t.name));
        }
        let known_needs = ["time", "fault-injection", "shutdown"];
        if let Some(n) = t.needs.iter().find(|n| !known_needs.contains(&n.as_str())) {
            failures.push(format!("{}: unknown need {n:?}", t.name));
        }
        if t.spec.is_empty() || t.spec.iter().any(|s| !s.starts_with('§')) {
            failures.push(format!("{}: spec must cite SPEC sections", t.name));
        }
        let mut sim = Sim::new(&file);
        let result = t.steps.iter().enumerate().try_for_each(|(i, step)| {
            let action = step.action().map_err(|e| format!("step {i}: {e}"))?;
            sim.run(action).map_err(|e| format!("step {i}: {e}"))
        });
        if let Err(why) = result.and_then(|()| sim.finish()) {
            failures.push(format!("{} ({}): {why}", t.name, t.spec.join(", ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failing transcript(s):\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
}

#[test]
fn placeholder_matching() {
    assert!(matches(
        r#"{"accepted":{"id":"$ID"}}"#,
        r#"{"accepted":{"id":"e1"}}"#
    ));
    assert!(!matches(
        r#"{"accepted":{"id":"$ID"}}"#,
        r#"{"accepted":{"id":""}}"#
    ));
    assert!(matches(
        r#"{"ts":"$TS","x":1}"#,
        r#"{"ts":"2026-07-21T06:41:02.517Z","x":1}"#
    ));
    assert!(!matches(r#"{"ts":"$TS"}"#, r#"{"ts":"yesterday"}"#));
    assert!(matches(
        r#"{"m":"a ($TEXT)"}"#,
        r#"{"m":"a (disk \"full\" (28))"}"#
    ));
    assert!(!matches(r#"{"m":"$TEXT"}"#, r#"{"m":"a","n":"b"}"#));
    assert!(!matches(r#"{"ok":{}}"#, r#"{"ok":{}} "#));
}
