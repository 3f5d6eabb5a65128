//! Phase 7's approvals part (issue 37; docs/performance.md "Approvals"): what one permission
//! request costs through the hub, measured the way a delegator answering at once sees it.
//!
//! One task on `benchask` (`fake-acp-agent ask_loop N`), an agent that asks again as soon as
//! it has its answer. The bench keeps an `await {"replyTo":TASK,"kind":"task_request"}`
//! parked before it answers, so each cycle is: the bench writes `task_answer` (clock starts) →
//! the hub commits `request_answered` → replies `answered` (first figure) and hands the answer
//! to the runner → the agent reads it and asks again → the session holds the request → the
//! book commits its envelope, row and `request_opened` → the parked await reads the envelope
//! (clock stops: the round trip). Hub CPU is the process's over the timed cycles.
//!
//! Owns the measurement. Refuses sleeping to synchronize (each step is a read with the
//! bench's I/O timeout) and any claim about the agent's own cost or a person's think time.

use crate::base::Res;
use crate::client::{expect_ok, open, read_line, Conn};
use crate::delegate_fixture::{DelegateFixture, ASK_AGENT};
use crate::fixtures::{Agent, Fixture};
use crate::hub_process::{with_hub_config, HubProcess};
use crate::options::{Opts, StoreKind};
use crate::phase_delegate::{delegate_bytes, expect_delegated};
use crate::stats::{Latency, Run};
use agent_hub_proto::wire::approval::TaskAnswerRequest;
use agent_hub_proto::wire::{AwaitRequest, ClientLine, HubLine};
use std::time::{Duration, Instant};

/// Requests answered before the clock runs (connections, the allocator, the page cache).
pub(crate) fn warmup_of(requests: usize) -> usize {
    (requests / 10).clamp(1, 50)
}

/// How many requests `benchask` asks: the warm-up, the timed ones, and one more whose arrival
/// ends the last timed cycle.
pub(crate) fn asks_of(requests: usize) -> usize {
    warmup_of(requests) + requests + 1
}

pub(crate) struct ApprovalsResult {
    pub(crate) requests: usize,
    pub(crate) warmup: usize,
    /// `task_answer` written → its `answered` line read (the answer's commit).
    pub(crate) to_answered: Latency,
    /// `task_answer` written → the agent's next request read at the parked await.
    pub(crate) round_trip: Latency,
    /// The timed cycles: wall clock and hub CPU.
    pub(crate) run: Run,
}

/// On a fresh hub of the store `kind`.
pub(crate) fn phase_approvals(
    server: &std::path::Path,
    fx: &Fixture,
    dfx: &DelegateFixture,
    opts: &Opts,
    kind: StoreKind,
) -> Res<ApprovalsResult> {
    let config = dfx.config(kind);
    with_hub_config(server, fx, kind, config, |hub| {
        cycles(hub, fx, dfx, opts.approval_requests)
    })
}

fn cycles(
    hub: &HubProcess,
    fx: &Fixture,
    dfx: &DelegateFixture,
    requests: usize,
) -> Res<ApprovalsResult> {
    let warmup = warmup_of(requests);
    let mut buf = Vec::with_capacity(4096);
    let bytes = delegate_bytes(&fx.delegator, ASK_AGENT, &dfx.cwd, "bench approvals")?;
    let mut tx = open(hub.addr, &bytes)?;
    expect_ok(&mut tx, &mut buf)?;
    let task = expect_delegated(&mut tx, &mut buf)?;
    let park = request_await_bytes(&fx.delegator, &task);
    let mut rx = open(hub.addr, &park)?;
    expect_ok(&mut rx, &mut buf)?;
    let mut request = read_request(&mut rx, &mut buf, &task)?;
    let (mut answered, mut round) = (Vec::with_capacity(requests), Vec::with_capacity(requests));
    let mut cpu0 = hub.cpu()?;
    let mut t_start = Instant::now();
    for i in 0..warmup + requests {
        if i == warmup {
            cpu0 = hub.cpu()?;
            t_start = Instant::now();
        }
        // The next request's await is parked before the answer goes, so the envelope is
        // handed to a waiting reader, never queued for a late one.
        let mut next = open(hub.addr, &park)?;
        expect_ok(&mut next, &mut buf)?;
        let line = ClientLine::TaskAnswer(TaskAnswerRequest {
            task: task.clone(),
            request: Some(request),
            option: "allow".into(),
            message: None,
        });
        let mut bytes = fx.delegator.hello.to_vec();
        bytes.extend_from_slice(line.encode().as_bytes());
        let t0 = Instant::now();
        let mut ans = open(hub.addr, &bytes)?;
        expect_ok(&mut ans, &mut buf)?;
        match read_line(&mut ans, &mut buf)? {
            HubLine::TaskAnswer(r) if r.state == "answered" => {}
            other => return Err(format!("task_answer: expected answered, got {other:?}")),
        }
        let to_answered = t0.elapsed();
        request = read_request(&mut next, &mut buf, &task)?;
        let cycle = t0.elapsed();
        if i >= warmup {
            answered.push(to_answered);
            round.push(cycle);
        }
    }
    let wall = t_start.elapsed();
    let hub_cpu = hub.cpu()?.saturating_sub(cpu0);
    // The last request is left to the task's end: cancel it, so the hub stops clean.
    let cancel = ClientLine::Cancel(agent_hub_proto::wire::TaskRequest { task });
    let mut bytes = fx.delegator.hello.to_vec();
    bytes.extend_from_slice(cancel.encode().as_bytes());
    let mut c = open(hub.addr, &bytes)?;
    expect_ok(&mut c, &mut buf)?;
    read_line(&mut c, &mut buf)?;
    Ok(ApprovalsResult {
        requests,
        warmup,
        to_answered: Latency::of(answered),
        round_trip: Latency::of(round),
        run: Run {
            clients: 1,
            ops: requests,
            wall,
            hub_cpu,
            latency: None,
            flushes: None,
        },
    })
}

/// hello + `{"await":{"replyTo":TASK,"kind":"task_request"}}`.
fn request_await_bytes(from: &Agent, task: &str) -> Vec<u8> {
    let mut out = from.hello.to_vec();
    let req = AwaitRequest {
        reply_to: Some(task.to_owned()),
        kind: Some("task_request".into()),
        timeout_secs: Some(Duration::from_secs(60).as_secs()),
        ack: None,
        reader: None,
    };
    out.extend_from_slice(ClientLine::Await(req).encode().as_bytes());
    out
}

/// The open request's id from the envelope the parked await reads.
fn read_request(conn: &mut Conn, buf: &mut Vec<u8>, task: &str) -> Res<String> {
    let text = match read_line(conn, buf)? {
        HubLine::Envelope(text) => text,
        other => {
            return Err(format!(
                "await task_request: expected an envelope, got {other:?}"
            ))
        }
    };
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("task_request envelope: {e}"))?;
    let body = &v["body"];
    if v["from"] != "hub" || v["kind"] != "task_request" || body["task"] != task {
        return Err(format!("not the task's request envelope: {text}"));
    }
    if body["state"] != "open" {
        return Err(format!("the request is not open: {}", body["state"]));
    }
    body["request"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| "a task_request without a request id".into())
}
