//! What the core asks the IO layer to do: write a line, hand over an envelope, close a
//! connection, record an audit event, log a service line, write a commit batch.
//!
//! Owns the output vocabulary of the core: `Output`, the payloads its variants carry
//! (`Batch`, `PeerSend`, `WatchedProcess`, beside it as `durable` holds `StoreOp`, so no
//! producer of an output is imported to name one), and the audit record encoding (format
//! version `AUDIT_FORMAT_VERSION`). A leaf: it imports no other room of the hub but the
//! leaves `conn_map` and `durable`. Refuses IO: the server writes these where they belong.

use super::conn_map::ConnId;
use super::durable::StoreOp;
use std::sync::Arc;

/// The version carried by every audit record as `"v"`. Bump it when a record's meaning or a
/// key changes (docs/operations.md, "Audit log format"). Version 3: every record carries
/// `prev`, which the server fills in as it writes (`event_loop::audit_chain`), and adds
/// `given_up` (SPEC §12.2). Version 4 (issue 29): `connected` is written with a connection's
/// first outcome (its hello, or its end without one) and, for a connection that never
/// authenticates, only within the strangers' record rate; the others are counted in the new
/// `strangers` record (`hub::strangers`); `auth_failed` names the name tried unless it holds
/// a token (SPEC §6.2, §8.1).
pub const AUDIT_FORMAT_VERSION: u32 = 4;

/// One instruction from the core, drained through `Hub::poll_output` in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Append a complete line (with `\n`) to the connection's write buffer.
    Write { conn: ConnId, line: String },
    /// Append a delivery line: the envelope is handed to the reader's socket (the word
    /// "deliver" is kept for `crates/cli/src/deliver/`, which gets mail into running agents). The IO
    /// layer must report the first byte the socket accepts via
    /// `Hub::handle_delivery_committed`, and must not write it at all to a peer that has
    /// reached EOF or errored (then it closes with `flushed = false`).
    Handoff { conn: ConnId, line: String },
    /// The connection's final line is buffered and the exchange is over: flush it, report
    /// the flush with `Hub::handle_flushed`, and keep passing every line the client sends to
    /// `Hub::handle_line` (which answers it with an error and a `Close`) until the core's
    /// `Close` (the answer linger of SPEC §4.3, `limits.answer_linger_ms`, decided in
    /// `Conns::flushed`) or the client's close; then call `Hub::handle_closed`.
    Answered { conn: ConnId },
    /// Flush what is buffered, then close; the IO layer then calls `Hub::handle_closed`.
    /// With `linger` (the connection's last line was an error, or the answer linger is over,
    /// SPEC §4.4) it first shuts down its sending side, discards what the client still sends
    /// and waits, up to `limits.hello_timeout_ms`, for the client to close, so unread input
    /// cannot turn the close into a reset that destroys the last line.
    Close { conn: ConnId, linger: bool },
    /// An audit record that depends on nothing (written with the next batch).
    Audit(AuditEvent),
    /// A service-log line (no timestamp; the writer adds it). Never holds a token or a body.
    Log(String),
    /// A service-log line at level ERROR (a failing store or disk).
    LogError(String),
    /// Write this batch (store operations, then audit records, then the store commit) and
    /// report the result with `Hub::handle_committed` (`Batch`).
    Commit(Batch),
    /// Hand the envelope (canonical text, `to` = `name@peer`) to the relay link with `peer`
    /// as a `bus_forward`; report its ack with `Hub::handle_forward_ack(peer, seq, …)`, or a
    /// send the link refused as a permanent error there (SPEC §15).
    Forward {
        peer: String,
        seq: u64,
        envelope: Arc<str>,
    },
    /// Answer the peer's `bus_forward` whose relay message id is `ack_id`: `error` None means
    /// it is durably queued here.
    ForwardAck {
        peer: String,
        ack_id: String,
        error: Option<String>,
    },
    /// Start a delegated task's agent (`event_loop::executor`); its events come back through
    /// `Hub::handle_task_event`. Its `running` state is already committed.
    StartTask(Box<crate::tasks::StartSpec>),
    /// Ask a running task's agent to stop (`session/cancel`, then the runner's shutdown).
    CancelTask { task: crate::tasks::TaskId },
    /// Hand a running task's runner the decision for its held request `seq` (issue 37
    /// design §4.4); the session writes it to the agent.
    AnswerTask {
        task: crate::tasks::TaskId,
        seq: u32,
        answer: crate::tasks::RequestAnswer,
    },
    /// Hand a task's runner a follow-up turn (issue 38 design §2): its session sends it at
    /// once when kept, or with `interrupt` after cancelling the open turn.
    PromptTask {
        task: crate::tasks::TaskId,
        turn: u32,
        text: String,
        interrupt: bool,
    },
    /// Close a task's kept session (`session/close` when its agent takes it, then the
    /// runner's shutdown).
    CloseTask { task: crate::tasks::TaskId },
    /// Send a task message to the relay peer over its lasting link (docs/delegation.md
    /// "Across hubs"). With no such link nothing is sent and the relay reports the link down
    /// (`Hub::handle_peer_link`); the book sends what it must again on the next link.
    ToPeer(Box<PeerSend>),
    /// A task was running when the hub last stopped and the store knows its process group:
    /// make sure that group is gone, if it is still the task's (docs/delegation.md
    /// "Durability"). Nothing waits for it.
    KillOrphan { task: String, pid: u32 },
    /// Check whether each process still runs (SPEC §14, `hub::liveness`): report each that
    /// exited with `Hub::handle_process_exited`, then `Hub::handle_processes_checked`. The
    /// loop only looks (never signals); a pid whose start time differs is another process.
    CheckProcesses(Vec<(String, WatchedProcess)>),
}

/// One commit the IO layer must carry out, in this order: apply `store_ops` in one store
/// transaction; append `audit` to the audit log (after the records already emitted); commit
/// the store transaction. If any step fails, undo what was done (roll the transaction back,
/// or take the audit batch back out when the store commit fails) and report the error with
/// `Hub::handle_committed(id, Err(..))`; on success report `Ok`. With `sync`, ask the store's
/// flush to disk for `id` after a successful commit and report it with `Hub::handle_synced`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// Batches are numbered in the order they are emitted, from 1.
    pub id: u64,
    pub store_ops: Vec<StoreOp>,
    pub audit: Vec<AuditEvent>,
    /// Replies wait for the flush of this batch to disk (`store.sync = "full"`).
    pub sync: bool,
}

/// One task message for a relay peer (`Output::ToPeer`).
#[derive(Debug, Clone, PartialEq)]
pub struct PeerSend {
    pub peer: String,
    pub payload: crate::relay::message::Payload,
    /// A final `task_handoff` of the peer's task of this id: the relay reports its ack.
    pub handoff: Option<String>,
}

// `Output` is `Eq`; the payloads the book builds carry only finite numbers (it drops NaN and
// infinite costs), so equality is reflexive for every value made here.
impl Eq for PeerSend {}

/// A process the loop is asked to check: `start` is its start time as the reporter read it
/// (Linux: `/proc/PID/stat` field 22), None when unknown; a process with that pid but another
/// start time is a different process, and the watched one has exited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct WatchedProcess {
    pub pid: u32,
    pub start: Option<u64>,
}

/// A protocol event for the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditEvent {
    Connected {
        conn: ConnId,
    },
    Authenticated {
        conn: ConnId,
        name: String,
    },
    /// `name` is the name the hello asserted; None when it holds a roster or task token (a
    /// token pasted in the wrong field) or is longer than any roster name can be (SPEC §6.2).
    AuthFailed {
        conn: ConnId,
        name: Option<String>,
    },
    /// Connections that never authenticated and were counted instead of recorded one by one,
    /// once the strangers' record rate was spent (`hub::strangers`, SPEC §8.1): how many since
    /// `since` (RFC 3339), how many of them failed their hello, and the names those tried
    /// with their counts (at most `strangers::SUMMARY_MAX_NAMES`, first tried first; names
    /// not recordable, and names past that many, are counted in `auth_failed` only).
    Strangers {
        since: String,
        connections: u64,
        auth_failed: u64,
        names: Vec<(String, u64)>,
    },
    /// An envelope accepted in full, `from` stamped. `conn` is None for the hub's bounces.
    Accepted {
        conn: Option<ConnId>,
        envelope: Arc<str>,
    },
    /// A send refused after validation (queue full, audit failure, cancelled by the client).
    Refused {
        conn: ConnId,
        id: String,
        reason: String,
    },
    /// The first byte of a delivery was accepted by the reader's socket. With `ack` the
    /// envelope stays the hub's until the reader acks it.
    Delivered {
        conn: ConnId,
        id: String,
        to: String,
        ack: bool,
    },
    /// The reader acked an ack-mode delivery, and the ack is durable.
    Acked {
        conn: ConnId,
        id: String,
        to: String,
        attempts: u32,
    },
    /// A delivery was not consumed (zero bytes accepted, or no ack); the envelope went back to
    /// routing. `attempts` counts such returns for this envelope.
    Requeued {
        conn: ConnId,
        id: String,
        to: String,
        reason: String,
        attempts: u32,
    },
    /// A resend of an id already accepted from the same sender: answered, not queued again.
    Duplicate {
        conn: ConnId,
        id: String,
    },
    /// A delivery cut short after its first byte: the envelope is gone.
    Lost {
        conn: ConnId,
        id: String,
        to: String,
        reason: String,
        bounced: bool,
    },
    /// An envelope reached its reader `limits.max_deliveries` times without an ack: it is not
    /// delivered again. `bounced`: its sender was sent a bounce (false for a bounce).
    GivenUp {
        conn: ConnId,
        id: String,
        to: String,
        reason: String,
        attempts: u32,
        bounced: bool,
    },
    /// An envelope from a peer hub's agent, `from` stamped `name@peer`, queued here.
    Received {
        peer: String,
        envelope: Arc<str>,
    },
    /// A peer hub's `bus_forward` that was not queued (the reason goes back in its ack).
    ForwardRefused {
        peer: String,
        id: String,
        reason: String,
    },
    /// An envelope for `name@peer` handed to the relay link with `peer`.
    Forwarded {
        peer: String,
        id: String,
        to: String,
    },
    /// The peer hub acked it: queued there, no longer ours. With `error`, it refused the
    /// envelope for good and the envelope was bounced to its sender.
    ForwardAcked {
        peer: String,
        id: String,
        to: String,
        attempts: u32,
        error: Option<String>,
    },
    /// A forward not acked (the link dropped, or no ack within the deadline): queued again.
    ForwardRequeued {
        peer: String,
        id: String,
        to: String,
        reason: String,
        attempts: u32,
    },
    /// An await timed out hub-side; nothing was consumed.
    Timeout {
        conn: ConnId,
        name: String,
    },
    /// The hub stopped with envelopes still queued (they are gone with the process).
    Shutdown {
        queued: usize,
    },
    /// A delegated task's step (docs/delegation.md "Audit"): accepted, started, cancel
    /// asked, ended, forgotten.
    Task(crate::tasks::TaskAudit),
    /// A lease's step (lease design §A.8, SPEC §8.1): granted, queued, renewed, released,
    /// expired, broken, a wait ended, a guarded check.
    Lease(super::leases::audit::LeaseAudit),
}

impl AuditEvent {
    /// The record as one JSON line (with `\n`), stamped with `ts` (RFC 3339, UTC).
    ///
    /// Written piece by piece (`wire::json_text`), not with `write!` and a `to_json` string
    /// per field: several records per operation under connection-per-op load
    /// (docs/performance.md, issue 13, "Design decisions"). The bytes are those of the
    /// earlier `write!` encoder, which the tests keep as the reference; the format is
    /// docs/operations.md's "Audit log format".
    pub fn encode_into(&self, ts: &str, out: &mut String) {
        use crate::wire::json_text::{push_bool, push_str as text, push_u64 as num};
        let opt_text = |out: &mut String, v: &Option<String>| match v {
            Some(v) => text(out, v),
            None => out.push_str("null"),
        };
        out.push_str("{\"v\":");
        num(out, u64::from(AUDIT_FORMAT_VERSION));
        out.push_str(",\"ts\":\"");
        out.push_str(ts);
        out.push_str("\",\"event\":");
        match self {
            AuditEvent::Connected { conn } => {
                out.push_str("\"connected\",\"conn\":");
                num(out, *conn);
            }
            AuditEvent::Authenticated { conn, name } => {
                out.push_str("\"authenticated\",\"conn\":");
                num(out, *conn);
                out.push_str(",\"name\":");
                text(out, name);
            }
            AuditEvent::AuthFailed { conn, name } => {
                out.push_str("\"auth_failed\",\"conn\":");
                num(out, *conn);
                out.push_str(",\"name\":");
                opt_text(out, name);
            }
            AuditEvent::Strangers {
                since,
                connections,
                auth_failed,
                names,
            } => {
                out.push_str("\"strangers\",\"since\":");
                text(out, since);
                out.push_str(",\"connections\":");
                num(out, *connections);
                out.push_str(",\"auth_failed\":");
                num(out, *auth_failed);
                out.push_str(",\"names\":{");
                for (i, (name, n)) in names.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    text(out, name);
                    out.push(':');
                    num(out, *n);
                }
                out.push('}');
            }
            AuditEvent::Accepted { conn, envelope } => {
                out.push_str("\"accepted\",\"conn\":");
                match conn {
                    Some(c) => num(out, *c),
                    None => out.push_str("null"),
                }
                out.push_str(",\"envelope\":");
                out.push_str(envelope);
            }
            AuditEvent::Refused { conn, id, reason } => {
                out.push_str("\"refused\",\"conn\":");
                num(out, *conn);
                out.push_str(",\"id\":");
                text(out, id);
                out.push_str(",\"reason\":");
                text(out, reason);
            }
            AuditEvent::Delivered { conn, id, to, ack } => {
                out.push_str("\"delivered\",\"conn\":");
                num(out, *conn);
                out.push_str(",\"id\":");
                text(out, id);
                out.push_str(",\"to\":");
                text(out, to);
                out.push_str(",\"ack\":");
                push_bool(out, *ack);
            }
            AuditEvent::Acked {
                conn,
                id,
                to,
                attempts,
            } => {
                out.push_str("\"acked\",\"conn\":");
                num(out, *conn);
                out.push_str(",\"id\":");
                text(out, id);
                out.push_str(",\"to\":");
                text(out, to);
                out.push_str(",\"attempts\":");
                num(out, u64::from(*attempts));
            }
            AuditEvent::Requeued {
                conn,
                id,
                to,
                reason,
                attempts,
            } => {
                out.push_str("\"requeued\",\"conn\":");
                num(out, *conn);
                out.push_str(",\"id\":");
                text(out, id);
                out.push_str(",\"to\":");
                text(out, to);
                out.push_str(",\"reason\":");
                text(out, reason);
                out.push_str(",\"attempts\":");
                num(out, u64::from(*attempts));
            }
            AuditEvent::Duplicate { conn, id } => {
                out.push_str("\"duplicate\",\"conn\":");
                num(out, *conn);
                out.push_str(",\"id\":");
                text(out, id);
            }
            AuditEvent::Lost {
                conn,
                id,
                to,
                reason,
                bounced,
            } => {
                out.push_str("\"lost\",\"conn\":");
                num(out, *conn);
                out.push_str(",\"id\":");
                text(out, id);
                out.push_str(",\"to\":");
                text(out, to);
                out.push_str(",\"reason\":");
                text(out, reason);
                out.push_str(",\"bounced\":");
                push_bool(out, *bounced);
            }
            AuditEvent::GivenUp {
                conn,
                id,
                to,
                reason,
                attempts,
                bounced,
            } => {
                out.push_str("\"given_up\",\"conn\":");
                num(out, *conn);
                out.push_str(",\"id\":");
                text(out, id);
                out.push_str(",\"to\":");
                text(out, to);
                out.push_str(",\"reason\":");
                text(out, reason);
                out.push_str(",\"attempts\":");
                num(out, u64::from(*attempts));
                out.push_str(",\"bounced\":");
                push_bool(out, *bounced);
            }
            AuditEvent::Timeout { conn, name } => {
                out.push_str("\"timeout\",\"conn\":");
                num(out, *conn);
                out.push_str(",\"name\":");
                text(out, name);
            }
            AuditEvent::Shutdown { queued } => {
                out.push_str("\"shutdown\",\"queued\":");
                num(out, *queued as u64);
            }
            AuditEvent::Task(t) => t.encode_fields_into(out),
            AuditEvent::Lease(l) => l.encode_fields_into(out),
            AuditEvent::Received { peer, envelope } => {
                out.push_str("\"received\",\"peer\":");
                text(out, peer);
                out.push_str(",\"envelope\":");
                out.push_str(envelope);
            }
            AuditEvent::ForwardRefused { peer, id, reason } => {
                out.push_str("\"forward_refused\",\"peer\":");
                text(out, peer);
                out.push_str(",\"id\":");
                text(out, id);
                out.push_str(",\"reason\":");
                text(out, reason);
            }
            AuditEvent::Forwarded { peer, id, to } => {
                out.push_str("\"forwarded\",\"peer\":");
                text(out, peer);
                out.push_str(",\"id\":");
                text(out, id);
                out.push_str(",\"to\":");
                text(out, to);
            }
            AuditEvent::ForwardAcked {
                peer,
                id,
                to,
                attempts,
                error,
            } => {
                out.push_str("\"forward_acked\",\"peer\":");
                text(out, peer);
                out.push_str(",\"id\":");
                text(out, id);
                out.push_str(",\"to\":");
                text(out, to);
                out.push_str(",\"attempts\":");
                num(out, u64::from(*attempts));
                out.push_str(",\"error\":");
                opt_text(out, error);
            }
            AuditEvent::ForwardRequeued {
                peer,
                id,
                to,
                reason,
                attempts,
            } => {
                out.push_str("\"forward_requeued\",\"peer\":");
                text(out, peer);
                out.push_str(",\"id\":");
                text(out, id);
                out.push_str(",\"to\":");
                text(out, to);
                out.push_str(",\"reason\":");
                text(out, reason);
                out.push_str(",\"attempts\":");
                num(out, u64::from(*attempts));
            }
        }
        out.push_str("}\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::to_json;
    use std::fmt::Write as _;

    impl AuditEvent {
        /// The encoder before issue 13's second pass (`write!` and `to_json` per field): the
        /// reference the hand-written one must equal byte for byte.
        fn encode_into_reference(&self, ts: &str, out: &mut String) {
            let _ = write!(
                out,
                "{{\"v\":{AUDIT_FORMAT_VERSION},\"ts\":\"{ts}\",\"event\":"
            );
            let _ = match self {
            AuditEvent::Connected { conn } => write!(out, "\"connected\",\"conn\":{conn}"),
            AuditEvent::Authenticated { conn, name } => {
                write!(out, "\"authenticated\",\"conn\":{conn},\"name\":{}", to_json(name))
            }
            AuditEvent::AuthFailed { conn, name } => write!(
                out,
                "\"auth_failed\",\"conn\":{conn},\"name\":{}",
                name.as_deref().map_or_else(|| "null".to_owned(), to_json)
            ),
            AuditEvent::Strangers { since, connections, auth_failed, names } => {
                let names: Vec<String> =
                    names.iter().map(|(n, c)| format!("{}:{c}", to_json(n))).collect();
                write!(
                    out,
                    "\"strangers\",\"since\":{},\"connections\":{connections},\"auth_failed\":{auth_failed},\"names\":{{{}}}",
                    to_json(since),
                    names.join(",")
                )
            }
            AuditEvent::Accepted { conn, envelope } => {
                let conn = conn.map_or_else(|| "null".to_owned(), |c| c.to_string());
                write!(out, "\"accepted\",\"conn\":{conn},\"envelope\":{envelope}")
            }
            AuditEvent::Refused { conn, id, reason } => write!(
                out,
                "\"refused\",\"conn\":{conn},\"id\":{},\"reason\":{}",
                to_json(id),
                to_json(reason)
            ),
            AuditEvent::Delivered { conn, id, to, ack } => write!(
                out,
                "\"delivered\",\"conn\":{conn},\"id\":{},\"to\":{},\"ack\":{ack}",
                to_json(id),
                to_json(to)
            ),
            AuditEvent::Acked { conn, id, to, attempts } => write!(
                out,
                "\"acked\",\"conn\":{conn},\"id\":{},\"to\":{},\"attempts\":{attempts}",
                to_json(id),
                to_json(to)
            ),
            AuditEvent::Requeued { conn, id, to, reason, attempts } => write!(
                out,
                "\"requeued\",\"conn\":{conn},\"id\":{},\"to\":{},\"reason\":{},\"attempts\":{attempts}",
                to_json(id),
                to_json(to),
                to_json(reason)
            ),
            AuditEvent::Duplicate { conn, id } => write!(out, "\"duplicate\",\"conn\":{conn},\"id\":{}", to_json(id)),
            AuditEvent::Lost { conn, id, to, reason, bounced } => write!(
                out,
                "\"lost\",\"conn\":{conn},\"id\":{},\"to\":{},\"reason\":{},\"bounced\":{bounced}",
                to_json(id),
                to_json(to),
                to_json(reason)
            ),
            AuditEvent::GivenUp { conn, id, to, reason, attempts, bounced } => write!(
                out,
                "\"given_up\",\"conn\":{conn},\"id\":{},\"to\":{},\"reason\":{},\"attempts\":{attempts},\"bounced\":{bounced}",
                to_json(id),
                to_json(to),
                to_json(reason)
            ),
            AuditEvent::Timeout { conn, name } => {
                write!(out, "\"timeout\",\"conn\":{conn},\"name\":{}", to_json(name))
            }
            AuditEvent::Shutdown { queued } => write!(out, "\"shutdown\",\"queued\":{queued}"),
            AuditEvent::Task(t) => {
                t.encode_fields_into(out);
                Ok(())
            }
            AuditEvent::Lease(l) => {
                l.encode_fields_into(out);
                Ok(())
            }
            AuditEvent::Received { peer, envelope } => {
                write!(out, "\"received\",\"peer\":{},\"envelope\":{envelope}", to_json(peer))
            }
            AuditEvent::ForwardRefused { peer, id, reason } => write!(
                out,
                "\"forward_refused\",\"peer\":{},\"id\":{},\"reason\":{}",
                to_json(peer),
                to_json(id),
                to_json(reason)
            ),
            AuditEvent::Forwarded { peer, id, to } => write!(
                out,
                "\"forwarded\",\"peer\":{},\"id\":{},\"to\":{}",
                to_json(peer),
                to_json(id),
                to_json(to)
            ),
            AuditEvent::ForwardAcked { peer, id, to, attempts, error } => write!(
                out,
                "\"forward_acked\",\"peer\":{},\"id\":{},\"to\":{},\"attempts\":{attempts},\"error\":{}",
                to_json(peer),
                to_json(id),
                to_json(to),
                error.as_deref().map_or_else(|| "null".to_owned(), to_json)
            ),
            AuditEvent::ForwardRequeued { peer, id, to, reason, attempts } => write!(
                out,
                "\"forward_requeued\",\"peer\":{},\"id\":{},\"to\":{},\"reason\":{},\"attempts\":{attempts}",
                to_json(peer),
                to_json(id),
                to_json(to),
                to_json(reason)
            ),
        };
            out.push_str("}\n");
        }
    }

    /// Every kind of record, with values that need escapes, Nones and edge numbers: the
    /// hand-written encoder writes the earlier encoder's bytes (so old and new logs read and
    /// chain alike, docs/operations.md "Audit log format").
    #[test]
    fn encode_into_writes_the_reference_bytes() {
        let nasty = "q\"b\\s\n\t\u{1}\u{7f}é😀";
        let s = || nasty.to_owned();
        let env: Arc<str> = Arc::from("{\"id\":\"x\",\"body\": {\"b\" :1}}");
        let events = [
            AuditEvent::Connected { conn: 0 },
            AuditEvent::Connected { conn: u64::MAX },
            AuditEvent::Authenticated { conn: 7, name: s() },
            AuditEvent::AuthFailed {
                conn: 7,
                name: None,
            },
            AuditEvent::AuthFailed {
                conn: 7,
                name: Some(s()),
            },
            AuditEvent::Accepted {
                conn: None,
                envelope: env.clone(),
            },
            AuditEvent::Accepted {
                conn: Some(12),
                envelope: env.clone(),
            },
            AuditEvent::Refused {
                conn: 1,
                id: s(),
                reason: s(),
            },
            AuditEvent::Delivered {
                conn: 1,
                id: s(),
                to: s(),
                ack: false,
            },
            AuditEvent::Delivered {
                conn: 1,
                id: s(),
                to: s(),
                ack: true,
            },
            AuditEvent::Acked {
                conn: 1,
                id: s(),
                to: s(),
                attempts: u32::MAX,
            },
            AuditEvent::Requeued {
                conn: 1,
                id: s(),
                to: s(),
                reason: s(),
                attempts: 0,
            },
            AuditEvent::Duplicate { conn: 1, id: s() },
            AuditEvent::Lost {
                conn: 1,
                id: s(),
                to: s(),
                reason: s(),
                bounced: true,
            },
            AuditEvent::GivenUp {
                conn: 1,
                id: s(),
                to: s(),
                reason: s(),
                attempts: 3,
                bounced: false,
            },
            AuditEvent::Received {
                peer: s(),
                envelope: env.clone(),
            },
            AuditEvent::ForwardRefused {
                peer: s(),
                id: s(),
                reason: s(),
            },
            AuditEvent::Forwarded {
                peer: s(),
                id: s(),
                to: s(),
            },
            AuditEvent::ForwardAcked {
                peer: s(),
                id: s(),
                to: s(),
                attempts: 2,
                error: None,
            },
            AuditEvent::ForwardAcked {
                peer: s(),
                id: s(),
                to: s(),
                attempts: 2,
                error: Some(s()),
            },
            AuditEvent::ForwardRequeued {
                peer: s(),
                id: s(),
                to: s(),
                reason: s(),
                attempts: 9,
            },
            AuditEvent::Timeout { conn: 3, name: s() },
            AuditEvent::Shutdown { queued: 0 },
            AuditEvent::Shutdown {
                queued: 123_456_789,
            },
            AuditEvent::Strangers {
                since: "2026-01-01T00:00:00.000001Z".into(),
                connections: 3000,
                auth_failed: 2999,
                names: vec![(s(), 2), ("alpha".into(), u64::MAX)],
            },
            AuditEvent::Strangers {
                since: String::new(),
                connections: 0,
                auth_failed: 0,
                names: Vec::new(),
            },
        ];
        for e in &events {
            let (mut new, mut old) = (String::from("keep\n"), String::from("keep\n"));
            e.encode_into("2026-01-01T00:00:00.000001Z", &mut new);
            e.encode_into_reference("2026-01-01T00:00:00.000001Z", &mut old);
            assert_eq!(new, old, "{e:?}");
        }
    }

    #[test]
    fn records_are_json_with_version() {
        let events = [
            AuditEvent::Connected { conn: 1 },
            AuditEvent::Accepted {
                conn: None,
                envelope: Arc::from("{\"id\":\"x\",\"body\":{\"b\":1}}"),
            },
            AuditEvent::Lost {
                conn: 2,
                id: "i\"d".into(),
                to: "t".into(),
                reason: "r".into(),
                bounced: true,
            },
            AuditEvent::Shutdown { queued: 3 },
            AuditEvent::Strangers {
                since: "2026-01-01T00:00:00.000Z".into(),
                connections: 2,
                auth_failed: 1,
                names: vec![("mallory".into(), 1)],
            },
            AuditEvent::ForwardAcked {
                peer: "west".into(),
                id: "i".into(),
                to: "r@west".into(),
                attempts: 1,
                error: Some("no \"r\"".into()),
            },
            AuditEvent::ForwardAcked {
                peer: "west".into(),
                id: "i".into(),
                to: "r@west".into(),
                attempts: 0,
                error: None,
            },
            AuditEvent::Received {
                peer: "west".into(),
                envelope: Arc::from("{\"id\":\"x\"}"),
            },
        ];
        for e in events {
            let mut s = String::new();
            e.encode_into("2026-01-01T00:00:00.000Z", &mut s);
            assert!(s.ends_with('\n'));
            let v: serde_json::Value = serde_json::from_str(&s).unwrap();
            assert_eq!(v["v"], AUDIT_FORMAT_VERSION);
            assert!(v["event"].is_string());
        }
    }
}
