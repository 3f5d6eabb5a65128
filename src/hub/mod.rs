//! The sans-IO hub core (SPEC §4–§5): each connection's protocol state (hello → ok → one
//! verb → one reply), authentication, routing through the `Router`, deadlines as data, the
//! staging of sends until their audit record is written, delivery outcomes and bounces.
//!
//! Inputs are `handle_*` with the time passed in; outputs are drained with `poll_output`; the
//! next deadline is `poll_timeout`. Refuses: sockets, files, clocks, threads. The mio loop in
//! `server` only moves bytes and applies outputs.
// The sans-IO line (clippy.toml): no sockets, files, processes, threads, clock or OS randomness.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

mod admit;
mod commit;
pub mod event;
pub mod forward;
pub mod ids;
pub mod ledger;
mod pipeline;
mod redelivery;
pub mod router;

pub use event::{AuditEvent, Output};
pub use router::{Filter, MailboxStats, Parked, Queued, Router};

use crate::config::Limits;
use crate::roster::{Roster, HUB_NAME};
use crate::store::{Loaded, StoreOp};
use crate::wire::{
    AgentPresence, AwaitRequest, ClientLine, Envelope, EnvelopeStatus, HubLine, IdRequest,
    ParkedFilter, Presence,
};
use chrono::{DateTime, SecondsFormat, Utc};
use ledger::{Ledger, Record, State};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A connection as the core knows it: an opaque number the IO layer picks.
pub type ConnId = u64;

/// The time, passed in: `mono` drives deadlines; `wall` only stamps the `ts` of bounces.
#[derive(Debug, Clone, Copy)]
pub struct Now {
    pub mono: Instant,
    pub wall: DateTime<Utc>,
}

/// Where a staged send goes once committed.
#[derive(Debug)]
enum Target {
    /// A waiter claimed at staging time (still `Phase::Claimed` unless it went away).
    Waiter(ConnId),
    /// The queue; `reserved` says whether cap room was reserved (bounces waive the caps).
    Queue { reserved: bool },
}

#[derive(Debug)]
struct Staged {
    /// The sender's connection; None for the hub's own bounces and for envelopes from peers.
    conn: Option<ConnId>,
    /// An envelope a peer hub forwarded: its peer id and the `bus_forward`'s relay message id,
    /// acked once the envelope is durable here (SPEC §15).
    from_peer: Option<(String, String)>,
    env: Queued,
    target: Target,
    /// For the ledger (idempotent resends).
    digest: [u8; 32],
}

/// An ack waiting for the commit that makes it durable (SPEC §12.2).
#[derive(Debug)]
struct StagedAck {
    conn: ConnId,
    env: Queued,
}

#[derive(Debug)]
enum Phase {
    /// Waiting for the hello line.
    Hello,
    /// Authenticated; waiting for the verb line.
    Verb,
    /// A send is staged; `accepted` goes out after the commit.
    Staged,
    /// A parked await; `deadline` None waits forever; `ack` asks for acknowledged delivery.
    Parked {
        parked: Parked,
        deadline: Option<Instant>,
        ack: bool,
    },
    /// A parked await that a staged send has claimed; the deadline is suspended.
    Claimed {
        parked: Parked,
        deadline: Option<Instant>,
        ack: bool,
    },
    /// A delivery line is out. Plain: consumed once the socket accepted its first byte
    /// (`committed`). Ack mode: consumed only by the reader's ack.
    Delivering {
        env: Queued,
        committed: bool,
        ack: bool,
    },
    /// The reader acked; the ack waits for the commit that makes it durable.
    AckStaged,
    /// The verb's outcome is committed to the store; its final line (`accepted`, `acked`)
    /// waits for the store's flush to disk (SPEC §12.1). `outcome` is for the service log.
    Syncing { outcome: &'static str },
    /// The final line is queued and `Output::Answered` emitted: the exchange is over, the
    /// connection stays open until the client closes it, and a line it sends meanwhile gets
    /// the error of SPEC §4.3.
    Replied,
    /// The final line is queued and Close emitted; waiting for `handle_closed`.
    Done,
}

#[derive(Debug)]
struct Conn {
    phase: Phase,
    name: Option<String>,
    /// The verb, for the service log.
    verb: &'static str,
    opened: Instant,
    /// The deadline registered in `Hub::deadlines` for this connection, if any.
    deadline: Option<Instant>,
    /// The peer sent EOF: nothing more will arrive.
    eof: bool,
    /// Input that arrived while the verb was pending, kept for when the connection can take it
    /// (SPEC §4.3): the first such line, summarised as the line after an ack-mode delivery,
    /// when the pending verb is an ack-mode await (it becomes that line if the await delivers).
    held_ack: Option<pipeline::AckInput>,
    /// A line arrived while the verb was pending that will be answered as a line after the
    /// verb's reply.
    held_extra: bool,
    /// An error line was written: the close lingers (SPEC §4.4, `Output::Close`).
    errored: bool,
}

/// A final line, or a peer's forward ack, that waits for the store's flush of the commit
/// `batch` (SPEC §12.1).
#[derive(Debug)]
struct Held {
    batch: u64,
    reply: HeldReply,
}

#[derive(Debug)]
enum HeldReply {
    Line {
        conn: ConnId,
        line: HubLine,
        outcome: &'static str,
    },
    ForwardAck {
        peer: String,
        ack_id: String,
    },
}

/// The hub core. One per server; every method is synchronous and cheap.
#[derive(Debug)]
pub struct Hub {
    roster: Roster,
    limits: Limits,
    router: Router,
    conns: HashMap<ConnId, Conn>,
    deadlines: BTreeSet<(Instant, ConnId)>,
    staged: Vec<Staged>,
    outputs: VecDeque<Output>,
    shutting_down: bool,
    /// The next acceptance number (`Queued::seq`).
    next_seq: u64,
    staged_acks: Vec<StagedAck>,
    ledger: Ledger,
    /// Whether store operations are wanted (a durable store is configured).
    durable: bool,
    /// When the ledger is next purged of settled ids past the retention window.
    next_purge: Option<Instant>,
    /// Per agent: when it last authenticated and when it was last delivered to (wall ms).
    seen: HashMap<String, (Option<i64>, Option<i64>)>,
    /// Replies waiting for the store's flush, in commit order.
    held: VecDeque<Held>,
    /// The newest committed batch whose flush has not been reported: while set, every
    /// `accepted` and `acked` reply waits for it (`hold_replies_until`).
    unsynced: Option<u64>,
    /// Set by a failed flush: a duplicate resend can no longer be confirmed, since the first
    /// copy's pages may never reach the disk (the loop refuses new sends likewise).
    flush_failed: Option<String>,
    /// Mail across hubs (SPEC §15), when the relay has forwarding peers.
    forwarding: Option<forward::Forwarding>,
    /// The batches of staged work and their results (`commit`).
    commit: commit::Commits,
    /// Ids for the hub's own envelopes.
    ids: Box<dyn ids::IdSource>,
    /// Why each remembered envelope that is `bounced` or `lost` is gone, by acceptance seq,
    /// for `status` (`hub::redelivery`); forgotten with its id.
    reasons: HashMap<u64, String>,
}

/// How often settled ids are purged from the ledger.
const PURGE_INTERVAL: Duration = Duration::from_secs(10);

impl Hub {
    /// A hub with no connections. `ids` makes the ids of the hub's own envelopes (bounces):
    /// the core draws nothing random itself (`ids`).
    pub fn new(roster: Roster, limits: Limits, ids: Box<dyn ids::IdSource>) -> Hub {
        let router = Router::new(limits.queue_max_envelopes, limits.queue_max_bytes)
            .with_total_cap(limits.hub_max_bytes);
        let ledger = Ledger::new(limits.idempotency_window_secs, limits.idempotency_max_ids);
        Hub {
            roster,
            limits,
            router,
            conns: HashMap::new(),
            deadlines: BTreeSet::new(),
            staged: Vec::new(),
            outputs: VecDeque::new(),
            shutting_down: false,
            next_seq: 0,
            staged_acks: Vec::new(),
            ledger,
            durable: false,
            next_purge: None,
            seen: HashMap::new(),
            held: VecDeque::new(),
            unsynced: None,
            flush_failed: None,
            forwarding: None,
            reasons: HashMap::new(),
            commit: commit::Commits::default(),
            ids,
        }
    }

    /// Asks for store operations in each `Output::Commit`: set when a durable store is
    /// configured.
    pub fn with_durable(mut self, durable: bool) -> Hub {
        self.durable = durable;
        self
    }

    /// Rebuilds queues and the ledger from what the store held at startup (SPEC §12.1).
    /// Envelopes come back in acceptance order; an envelope delivered in ack mode and never
    /// acked is queued again.
    pub fn restore(&mut self, loaded: Loaded, now: Now) {
        for rec in loaded.ids {
            let Some(state) = State::parse(&rec.state) else {
                continue;
            };
            self.restore_reason(&rec);
            self.ledger.remember(
                &rec.sender,
                &rec.id,
                Record {
                    to: rec.to,
                    digest: rec.digest,
                    accepted_ms: rec.accepted_ms,
                    state,
                    state_ms: rec.state_ms,
                    seq: rec.seq,
                    ack_pending: false,
                },
            );
            // Every remembered id holds a place in acceptance order, queued or not.
            self.next_seq = self.next_seq.max(rec.seq + 1);
        }
        let now_ms = now.wall.timestamp_millis();
        for e in loaded.envelopes {
            self.next_seq = self.next_seq.max(e.seq + 1);
            // Queued it is; keep the time it became so unless a restart is what requeued it
            // (an ack-mode delivery the crash cut off before its ack).
            if self.ledger.state_of(&e.sender, &e.id) != Some(State::Queued) {
                self.ledger
                    .set_state(&e.sender, &e.id, State::Queued, false, now_ms);
            }
            self.ledger.set_seq(&e.sender, &e.id, e.seq);
            self.router.enqueue_back(Queued {
                id: e.id,
                from: e.sender,
                to: e.agent,
                kind: e.kind,
                correlation_id: e.correlation_id,
                text: Arc::from(e.text),
                seq: e.seq,
                attempts: e.attempts,
            });
        }
    }

    // ----- inputs -----

    /// A connection was accepted; the hello deadline starts now.
    pub fn handle_connect(&mut self, conn: ConnId, now: Now) {
        self.conns.insert(
            conn,
            Conn {
                phase: Phase::Hello,
                name: None,
                verb: "-",
                opened: now.mono,
                deadline: None,
                eof: false,
                held_ack: None,
                held_extra: false,
                errored: false,
            },
        );
        self.set_deadline(
            conn,
            Some(crate::deadline::after(
                now.mono,
                self.limits.hello_timeout(),
            )),
        );
        self.outputs
            .push_back(Output::Audit(AuditEvent::Connected { conn }));
        if self.shutting_down {
            self.fail(conn, "hub is shutting down", now);
        }
    }

    /// One complete line from the peer, without its `\n`. Every line is one line of the
    /// protocol, a blank one included (SPEC §2.1), and lines are taken in the order they came:
    /// one that arrives while the verb is pending waits until the verb is answered (SPEC §4.3),
    /// so how the bytes were split into reads never changes an outcome.
    pub fn handle_line(&mut self, conn: ConnId, line: &[u8], now: Now) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        match c.phase {
            Phase::Hello => self.on_hello_line(conn, line, now),
            Phase::Verb => self.on_verb_line(conn, line, now),
            Phase::Delivering {
                ack: true,
                committed: true,
                ..
            } => {
                let input = pipeline::AckInput::of_line(line);
                self.on_ack_input(conn, input, now)
            }
            // An ack cannot settle an envelope whose delivery has not reached the reader's
            // socket yet (SPEC §12.2): it waits for the first byte, like one written while
            // the await was parked.
            Phase::Delivering {
                ack: true,
                committed: false,
                ..
            }
            | Phase::Staged
            | Phase::Parked { .. }
            | Phase::Claimed { .. }
            | Phase::AckStaged
            | Phase::Syncing { .. } => self.hold(conn, || pipeline::AckInput::of_line(line)),
            Phase::Delivering { ack: false, .. } | Phase::Replied => {
                self.fail(conn, pipeline::LINE_AFTER_THE_VERB, now)
            }
            // An error line is out: input is discarded while the socket closes.
            Phase::Done => {}
        }
    }

    /// The peer sent a line longer than the cap (or other undecodable input). It takes the
    /// place of a line, in order, as `handle_line` says.
    pub fn handle_bad_input(&mut self, conn: ConnId, message: &str, now: Now) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        match c.phase {
            Phase::Hello | Phase::Verb => self.fail(conn, message, now),
            Phase::Delivering { ack: true, .. } => self.return_unacked(conn, message, now),
            Phase::Staged
            | Phase::Parked { .. }
            | Phase::Claimed { .. }
            | Phase::AckStaged
            | Phase::Syncing { .. } => {
                self.hold(conn, || pipeline::AckInput::NotAck(message.to_owned()))
            }
            Phase::Delivering { ack: false, .. } | Phase::Replied => {
                self.fail(conn, pipeline::LINE_AFTER_THE_VERB, now)
            }
            Phase::Done => {}
        }
    }

    /// The peer closed its sending side. A parked await is dropped at once (SPEC §5.4); a send
    /// still gets its reply.
    pub fn handle_eof(&mut self, conn: ConnId, now: Now) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.eof = true;
        match &c.phase {
            Phase::Hello | Phase::Verb => {
                self.log(conn, "closed", "peer closed before its verb", now);
                self.finish(conn);
            }
            Phase::Parked { parked, .. } => {
                let parked = parked.clone();
                self.router.unpark(&parked);
                self.log(
                    conn,
                    "dropped",
                    "parked await's peer closed; nothing consumed",
                    now,
                );
                self.finish(conn);
            }
            Phase::Claimed { .. } => {
                // The staged envelope is routed elsewhere at commit (see `commit`).
                self.log(
                    conn,
                    "dropped",
                    "claimed await's peer closed; the envelope is routed on",
                    now,
                );
                self.finish(conn);
            }
            // The reader can no longer ack: give the envelope back now.
            Phase::Delivering { ack: true, .. } => {
                self.return_unacked(conn, "reader closed without acking", now)
            }
            // Once answered, the IO layer closes on EOF itself (`Output::Answered`).
            Phase::Staged
            | Phase::Delivering { .. }
            | Phase::AckStaged
            | Phase::Syncing { .. }
            | Phase::Replied
            | Phase::Done => {}
        }
    }

    /// The IO layer released the socket. `flushed` says whether everything written to it was
    /// accepted by the kernel. Every connection ends with exactly one call.
    pub fn handle_closed(&mut self, conn: ConnId, flushed: bool, reason: &str, now: Now) {
        self.set_deadline(conn, None);
        let Some(mut c) = self.conns.remove(&conn) else {
            return;
        };
        match std::mem::replace(&mut c.phase, Phase::Done) {
            Phase::Parked { parked, .. } => {
                self.router.unpark(&parked);
                self.log_conn(&c, conn, "dropped", reason, now);
            }
            Phase::Staged => {
                // The sender never saw `accepted`, so the send must not happen.
                if let Some(pos) = self.staged.iter().position(|s| s.conn == Some(conn)) {
                    let s = self.staged.remove(pos);
                    self.unstage(
                        s,
                        &format!("sender went away before the commit: {reason}"),
                        now,
                    );
                    self.log_conn(&c, conn, "cancelled", reason, now);
                } else {
                    // Its batch is being written: the batch's result decides, unanswered.
                    let detail = format!("closed while its send was being committed: {reason}");
                    self.log_conn(&c, conn, "closed", &detail, now);
                }
            }
            Phase::Delivering {
                env,
                ack: true,
                committed,
            } => {
                self.log_conn(&c, conn, "requeued", reason, now);
                self.give_back(conn, env, reason, committed, now);
            }
            Phase::Delivering {
                env,
                committed: false,
                ..
            } => {
                self.log_conn(&c, conn, "requeued", reason, now);
                self.give_back(conn, env, reason, false, now);
            }
            Phase::Delivering {
                env,
                committed: true,
                ..
            } if !flushed => {
                self.log_conn(&c, conn, "lost", reason, now);
                self.lose(conn, env, reason, now);
            }
            Phase::Delivering { .. } => self.log_conn(&c, conn, "delivered", "", now),
            // An ack already read stands: the commit settles it without a reply.
            Phase::AckStaged => self.log_conn(&c, conn, "acked", reason, now),
            // Committed, but the peer left before the flush let its reply go out.
            Phase::Syncing { outcome } => {
                let detail = format!("closed before the store's flush: {reason}");
                self.log_conn(&c, conn, outcome, &detail, now)
            }
            Phase::Hello | Phase::Verb | Phase::Claimed { .. } | Phase::Replied | Phase::Done => {}
        }
    }

    /// The socket accepted the first byte of the delivery: the envelope is consumed (SPEC §5.3).
    /// In ack mode the envelope stays the hub's until the ack (SPEC §12.2).
    pub fn handle_delivery_committed(&mut self, conn: ConnId, now: Now) {
        let Some(Conn {
            phase:
                Phase::Delivering {
                    env,
                    committed,
                    ack,
                },
            ..
        }) = self.conns.get_mut(&conn)
        else {
            return;
        };
        if *committed {
            return;
        }
        *committed = true;
        let ack = *ack;
        self.seen.entry(env.to.clone()).or_default().1 = Some(now.wall.timestamp_millis());
        let (id, to, from, seq) = (env.id.clone(), env.to.clone(), env.from.clone(), env.seq);
        self.outputs.push_back(Output::Audit(AuditEvent::Delivered {
            conn,
            id: id.clone(),
            to,
            ack,
        }));
        if ack {
            // Only the ledger: on disk the envelope stays queued until its ack is durable,
            // and a restart queues it again anyway, so a durable "delivered" would cost a
            // commit per delivery and say nothing a restart keeps.
            self.ledger.set_state(
                &from,
                &id,
                State::Delivered,
                true,
                now.wall.timestamp_millis(),
            );
            // The line after this delivery that came before its first byte was taken (while
            // parked, or while the socket was full) is the ack candidate now.
            let held = self.conns.get_mut(&conn).and_then(|c| c.held_ack.take());
            if let Some(input) = held {
                self.on_ack_input(conn, input, now);
            }
        } else {
            self.store(StoreOp::Remove { seq });
            self.set_state(&from, &id, State::Delivered, false, now);
        }
    }

    /// Expires every deadline at or before `now`. The loop calls it once per iteration.
    pub fn handle_timeout(&mut self, now: Now) {
        self.new_commit_round();
        while let Some(&(at, conn)) = self.deadlines.first() {
            if at > now.mono {
                break;
            }
            self.deadlines.remove(&(at, conn));
            let Some(c) = self.conns.get_mut(&conn) else {
                continue;
            };
            c.deadline = None;
            match &c.phase {
                Phase::Hello => {
                    let msg = format!("no hello within {} ms", self.limits.hello_timeout_ms);
                    self.fail(conn, &msg, now);
                }
                Phase::Verb => {
                    let msg = format!("no verb within {} ms", self.limits.verb_timeout_ms);
                    self.fail(conn, &msg, now);
                }
                Phase::Parked { parked, .. } => {
                    let parked = parked.clone();
                    self.router.unpark(&parked);
                    let name = parked.agent;
                    self.outputs
                        .push_back(Output::Audit(AuditEvent::Timeout { conn, name }));
                    self.reply(conn, &HubLine::Timeout, "timeout", now);
                }
                Phase::Delivering { ack: true, .. } => {
                    let msg = format!(
                        "no ack within {} ms; the envelope will be delivered again",
                        self.limits.ack_timeout_ms
                    );
                    self.return_unacked(conn, &msg, now);
                }
                _ => {}
            }
        }
        self.expire_forwards(now);
        if self.next_purge.is_some_and(|t| t <= now.mono) {
            let now_ms = now.wall.timestamp_millis();
            for (sender, id, seq) in self.ledger.purge(now_ms) {
                self.reasons.remove(&seq);
                self.store(StoreOp::Forget { seq, sender, id });
            }
            // A backlog (a restart after a long stop) is forgotten a batch per iteration.
            let wait = if self.ledger.purge_pending(now_ms) {
                Duration::ZERO
            } else {
                PURGE_INTERVAL
            };
            self.next_purge = Some(crate::deadline::after(now.mono, wait));
        }
    }

    /// Begins a clean shutdown: every connection not waiting on a commit or a delivery gets an
    /// error line and is closed; parked awaits consume nothing.
    pub fn shutdown(&mut self, now: Now) {
        self.shutting_down = true;
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        for conn in ids {
            let phase = &self.conns[&conn].phase;
            match phase {
                Phase::Hello | Phase::Verb => self.fail(conn, "hub is shutting down", now),
                Phase::Parked { parked, .. } => {
                    let parked = parked.clone();
                    self.router.unpark(&parked);
                    self.fail(conn, "hub is shutting down; nothing was consumed", now);
                }
                // Answered: close once the final line is written, without waiting for the
                // client's close (a plain delivery's outcome is still decided at the close).
                Phase::Replied | Phase::Delivering { ack: false, .. } => {
                    self.outputs.push_back(Output::Close {
                        conn,
                        linger: false,
                    })
                }
                _ => {}
            }
        }
    }

    /// The hub is about to exit: the `shutdown` record, with what is still queued, goes last,
    /// after every loss, bounce and requeue the shutdown itself caused (SPEC §4.6, §8.1).
    pub fn stopped(&mut self) {
        let queued = self.router.total_queued();
        self.outputs
            .push_back(Output::Audit(AuditEvent::Shutdown { queued }));
    }

    /// Queued envelopes across all agents.
    pub fn total_queued(&self) -> usize {
        self.router.total_queued()
    }

    // ----- outputs -----

    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// The earliest deadline the core holds; the IO loop must call `handle_timeout` by then.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.deadlines.first().map(|&(at, _)| at),
            self.next_purge,
            self.forward_deadline(),
            self.commit_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Starts the periodic ledger purge (the loop calls this once it runs).
    pub fn start_purging(&mut self, now: Now) {
        self.next_purge = Some(now.mono + PURGE_INTERVAL);
    }

    /// Queue and waiter counts for one agent.
    pub fn stats(&self, agent: &str) -> MailboxStats {
        self.router.stats(agent)
    }

    pub fn router(&self) -> &Router {
        &self.router
    }

    /// Connections the core still tracks.
    pub fn open_connections(&self) -> usize {
        self.conns.len()
    }

    // ----- line handlers -----

    fn on_hello_line(&mut self, conn: ConnId, line: &[u8], now: Now) {
        match ClientLine::decode(line) {
            Err(e) => self.fail(conn, &e.to_string(), now),
            Ok(ClientLine::Hello(h)) => {
                if self.roster.verify(&h.name, &h.token) {
                    let c = self
                        .conns
                        .get_mut(&conn)
                        .expect("caller checked the connection exists");
                    c.name = Some(h.name.clone());
                    c.phase = Phase::Verb;
                    self.seen.entry(h.name.clone()).or_default().0 =
                        Some(now.wall.timestamp_millis());
                    self.set_deadline(
                        conn,
                        Some(crate::deadline::after(now.mono, self.limits.verb_timeout())),
                    );
                    self.outputs
                        .push_back(Output::Audit(AuditEvent::Authenticated {
                            conn,
                            name: h.name,
                        }));
                    self.write(conn, &HubLine::Ok);
                } else {
                    // A name not on the roster is client text like any other: it may be the
                    // token itself, sent in the wrong field, so it is not recorded.
                    let name = self.roster.contains(&h.name).then_some(h.name);
                    self.outputs
                        .push_back(Output::Audit(AuditEvent::AuthFailed { conn, name }));
                    self.fail(
                        conn,
                        "authentication failed: unknown name or wrong token",
                        now,
                    );
                }
            }
            Ok(other) => {
                let msg = format!("expected hello as the first line, got {}", other.tag());
                self.fail(conn, &msg, now)
            }
        }
    }

    fn on_verb_line(&mut self, conn: ConnId, line: &[u8], now: Now) {
        match ClientLine::decode(line) {
            Err(e) => self.fail(conn, &e.to_string(), now),
            Ok(ClientLine::Hello(_)) => self.fail(conn, "a second hello on one connection", now),
            Ok(ClientLine::Send(env)) => {
                self.conns.get_mut(&conn).expect("caller checked").verb = "send";
                self.on_send(conn, env, now)
            }
            Ok(ClientLine::Await(req)) => {
                self.conns.get_mut(&conn).expect("caller checked").verb = "await";
                self.on_await(conn, req, now)
            }
            Ok(ClientLine::Status(req)) => {
                self.conns.get_mut(&conn).expect("caller checked").verb = "status";
                self.on_status(conn, req, now)
            }
            Ok(ClientLine::Ack(_)) => {
                self.fail(conn, "an ack outside an acknowledged delivery", now)
            }
            Ok(ClientLine::Who) => {
                self.conns.get_mut(&conn).expect("caller checked").verb = "who";
                let presence = self.presence();
                self.reply(conn, &HubLine::Who(presence), "who", now)
            }
            // Delegation verbs (docs/delegation.md): answered once the task book is wired in.
            Ok(
                l @ (ClientLine::Delegate(_)
                | ClientLine::TaskStatus(_)
                | ClientLine::Tasks
                | ClientLine::Cancel(_)),
            ) => self.fail(
                conn,
                &format!("invalid {}: delegation is not enabled on this hub", l.tag()),
                now,
            ),
        }
    }

    /// Every roster name with its parked awaits (oldest first), queue length, and when it was
    /// last seen and last delivered to (SPEC §14). Linear in open connections: an
    /// operator-rate query.
    pub fn presence(&self) -> Presence {
        let mut parked: HashMap<&str, Vec<(u64, ParkedFilter)>> = HashMap::new();
        for c in self.conns.values() {
            if let (
                Phase::Parked { parked: p, .. } | Phase::Claimed { parked: p, .. },
                Some(name),
            ) = (&c.phase, &c.name)
            {
                let f = ParkedFilter {
                    reply_to: p.filter.reply_to.clone(),
                    kind: p.filter.kind.clone(),
                };
                parked.entry(name.as_str()).or_default().push((p.seq, f));
            }
        }
        let ts = |ms: Option<i64>| {
            ms.and_then(chrono::DateTime::from_timestamp_millis)
                .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
        };
        let agents = self
            .roster
            .names()
            .into_iter()
            .map(|name| {
                let mut waits = parked.remove(name).unwrap_or_default();
                waits.sort_by_key(|(seq, _)| *seq);
                let (seen, delivered) = self.seen.get(name).copied().unwrap_or_default();
                AgentPresence {
                    name: name.to_owned(),
                    parked: waits.into_iter().map(|(_, f)| f).collect(),
                    queued: self.router.stats(name).queued as u64,
                    last_seen: ts(seen),
                    last_delivery: ts(delivered),
                }
            })
            .collect();
        Presence { agents }
    }

    /// Ends an ack-mode delivery without an ack: an error line, and the envelope goes back.
    pub(super) fn return_unacked(&mut self, conn: ConnId, message: &str, now: Now) {
        let c = self.conns.get_mut(&conn).expect("caller checked");
        let Phase::Delivering { env, committed, .. } = std::mem::replace(&mut c.phase, Phase::Done)
        else {
            return;
        };
        self.fail(conn, message, now);
        self.give_back(conn, env, message, committed, now);
    }

    fn on_status(&mut self, conn: ConnId, req: IdRequest, now: Now) {
        let name = self.conns[&conn]
            .name
            .clone()
            .expect("verb phase is authenticated");
        let status = match self.ledger.lookup(&name, &req.id) {
            None => EnvelopeStatus {
                id: req.id,
                state: "unknown".into(),
                ..EnvelopeStatus::default()
            },
            Some((sender, rec)) => {
                let position = (rec.state == State::Queued)
                    .then(|| {
                        self.router
                            .queued(&rec.to)
                            .position(|q| q.seq == rec.seq && q.id == req.id)
                    })
                    .flatten()
                    .map(|p| p as u64 + 1);
                let attempts = self
                    .router
                    .queued(&rec.to)
                    .find(|q| q.seq == rec.seq)
                    .map(|q| q.attempts);
                EnvelopeStatus {
                    state: rec.state.as_str().into(),
                    from: Some(sender.to_owned()),
                    to: Some(rec.to.clone()),
                    position,
                    at: chrono::DateTime::from_timestamp_millis(rec.state_ms)
                        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true)),
                    attempts: attempts.filter(|&a| a > 0),
                    reason: self.reason_of(rec.seq, rec.state),
                    id: req.id,
                }
            }
        };
        self.reply(conn, &HubLine::Status(status), "status", now);
    }

    fn on_send(&mut self, conn: ConnId, mut env: Envelope, now: Now) {
        let name = self.conns[&conn]
            .name
            .clone()
            .expect("verb phase is authenticated");
        if env.kind == Envelope::BOUNCE_KIND {
            return self.fail(
                conn,
                "invalid envelope: kind \"bounce\" is reserved for the hub",
                now,
            );
        }
        if env.to.eq_ignore_ascii_case(HUB_NAME) {
            // Nobody can authenticate as the hub, so such an envelope could only pile up.
            return self.fail(
                conn,
                "invalid envelope: to \"hub\" names the hub itself, which receives nothing",
                now,
            );
        }
        env.from = name;
        match self.admit(&env, Some(conn), None) {
            admit::Admission::Staged => {
                self.set_deadline(conn, None);
                self.conns.get_mut(&conn).expect("caller checked").phase = Phase::Staged;
            }
            admit::Admission::Duplicate if self.flush_failed.is_some() => {
                let why = flush_failed_refusal(self.flush_failed.as_deref().unwrap_or(""));
                self.fail(conn, &format!("envelope not accepted: {why}"), now)
            }
            admit::Admission::Duplicate => {
                // A resend of an envelope already accepted (and durable): same answer, no copy.
                self.outputs.push_back(Output::Audit(AuditEvent::Duplicate {
                    conn,
                    id: env.id.clone(),
                }));
                let line = HubLine::Accepted { id: env.id };
                self.reply_durable(conn, line, "duplicate", now)
            }
            admit::Admission::Conflict => {
                let msg = format!(
                    "id {:?} was already accepted from you with another destination, kind, correlationId or body; use a new id",
                    env.id
                );
                self.fail(conn, &msg, now)
            }
            admit::Admission::InProgress => {
                let msg = format!(
                    "a send with id {:?} is being accepted on another connection; retry",
                    env.id
                );
                self.fail(conn, &msg, now)
            }
            admit::Admission::Full(reason) => {
                self.outputs.push_back(Output::Audit(AuditEvent::Refused {
                    conn,
                    id: env.id,
                    reason: reason.clone(),
                }));
                self.fail(conn, &reason, now)
            }
        }
    }

    fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        seq
    }

    fn on_await(&mut self, conn: ConnId, req: AwaitRequest, now: Now) {
        let name = self.conns[&conn]
            .name
            .clone()
            .expect("verb phase is authenticated");
        let filter = Filter {
            reply_to: req.reply_to,
            kind: req.kind,
        };
        let ack = req.ack.unwrap_or(false);
        if let Some(env) = self.router.take_first_match(&name, &filter) {
            return self.hand_off(conn, env, ack, now);
        }
        match req.timeout_secs {
            Some(0) => {
                self.outputs
                    .push_back(Output::Audit(AuditEvent::Timeout { conn, name }));
                self.reply(conn, &HubLine::Timeout, "timeout", now);
            }
            secs => {
                // A timeout too far away to represent waits forever.
                let deadline = secs.and_then(|s| now.mono.checked_add(Duration::from_secs(s)));
                let parked = self.router.park(&name, filter, conn);
                self.conns.get_mut(&conn).expect("caller checked").phase = Phase::Parked {
                    parked,
                    deadline,
                    ack,
                };
                self.set_deadline(conn, deadline);
            }
        }
    }

    // ----- routing -----

    fn accept(&mut self, s: Staged, now: Now) {
        let e = &s.env;
        let record = Record {
            to: e.to.clone(),
            digest: s.digest,
            accepted_ms: now.wall.timestamp_millis(),
            state: State::Queued,
            state_ms: now.wall.timestamp_millis(),
            seq: e.seq,
            ack_pending: false,
        };
        self.ledger.remember(&e.from, &e.id, record);
        // A sender that went away while its batch was being written gets no reply.
        if let Some(conn) = s.conn.filter(|c| self.conns.contains_key(c)) {
            let line = HubLine::Accepted {
                id: s.env.id.clone(),
            };
            self.reply_durable(conn, line, "accepted", now);
        }
        if let Some((peer, ack_id)) = &s.from_peer {
            self.outputs.push_back(Output::Audit(AuditEvent::Received {
                peer: peer.clone(),
                envelope: s.env.text.clone(),
            }));
            self.ack_forward_durable(peer.clone(), ack_id.clone());
        }
        match s.target {
            Target::Waiter(waiter) => match self.conns.get(&waiter).map(|c| (&c.phase, c.eof)) {
                Some((&Phase::Claimed { ack, .. }, false)) => {
                    self.hand_off(waiter, s.env, ack, now)
                }
                // The claimed waiter went away meanwhile: route as if it had never parked.
                _ => self.route(s.env, false, now),
            },
            Target::Queue { reserved } => {
                if reserved {
                    self.router.release(&s.env.to, s.env.size_bytes());
                }
                self.route(s.env, false, now);
            }
        }
    }

    /// Reverses a staging: frees its reservation or re-parks its claimed waiter in place.
    fn unstage(&mut self, s: Staged, reason: &str, now: Now) {
        match s.target {
            Target::Queue { reserved: true } => self.router.release(&s.env.to, s.env.size_bytes()),
            Target::Queue { reserved: false } => {}
            Target::Waiter(waiter) => self.unclaim(waiter, now),
        }
        if let Some(conn) = s.conn {
            let reason = reason.to_owned();
            self.outputs.push_back(Output::Audit(AuditEvent::Refused {
                conn,
                id: s.env.id,
                reason,
            }));
        }
    }

    /// A claimed waiter whose envelope did not come goes back to its place in its tier.
    fn unclaim(&mut self, waiter: ConnId, now: Now) {
        let Some(c) = self.conns.get_mut(&waiter) else {
            return;
        };
        let Phase::Claimed {
            parked,
            deadline,
            ack,
        } = std::mem::replace(&mut c.phase, Phase::Done)
        else {
            return;
        };
        if c.eof {
            return; // already finished in handle_eof
        }
        self.router.repark(&parked, waiter);
        c.phase = Phase::Parked {
            parked,
            deadline,
            ack,
        };
        self.set_deadline(waiter, deadline);
        if deadline.is_some_and(|d| d <= now.mono) {
            self.handle_timeout(now);
        }
    }

    /// Hands an accepted envelope to the best waiter, else queues it (a returned envelope back
    /// in its acceptance place, ahead of newer ones; a new one at the back). Caps are not
    /// checked here: the envelope is already accepted, and refusing it now would lose it.
    pub(super) fn route(&mut self, env: Queued, returned: bool, now: Now) {
        if let Some(peer) = self.remote_peer(&env.to) {
            if returned {
                self.router.requeue(env);
            } else {
                self.router.enqueue_back(env);
            }
            return self.pump_forward(&peer, now);
        }
        match self.router.claim_waiter(&env) {
            Some((waiter, _)) => {
                let ack = matches!(
                    self.conns.get(&waiter),
                    Some(Conn {
                        phase: Phase::Parked { ack: true, .. },
                        ..
                    })
                );
                self.hand_off(waiter, env, ack, now)
            }
            None if returned => self.router.requeue(env),
            None => self.router.enqueue_back(env),
        }
    }

    /// An envelope handed out (to a reader or a peer hub) came back unconsumed: one more
    /// attempt, durably, and queued again in the ledger.
    pub(super) fn count_return(&mut self, env: &mut Queued, now: Now) {
        env.attempts = env.attempts.saturating_add(1);
        self.store(StoreOp::Attempts {
            seq: env.seq,
            attempts: env.attempts,
        });
        let (from, id) = (env.from.clone(), env.id.clone());
        self.set_state(&from, &id, State::Queued, false, now);
    }

    fn hand_off(&mut self, conn: ConnId, env: Queued, ack: bool, now: Now) {
        let line = HubLine::Envelope(env.text.to_string()).encode();
        let c = self
            .conns
            .get_mut(&conn)
            .expect("deliver targets a live connection");
        c.phase = Phase::Delivering {
            env,
            committed: false,
            ack,
        };
        self.outputs.push_back(Output::Handoff { conn, line });
        if ack {
            self.set_deadline(
                conn,
                Some(crate::deadline::after(now.mono, self.limits.ack_timeout())),
            );
            // A line that came while the await was parked is the line after this delivery;
            // it is taken once the delivery's first byte is accepted
            // (`handle_delivery_committed`), never before.
        } else {
            self.end_exchange(conn, now);
        }
    }

    /// Records a state change in the ledger and, with a durable store, on disk.
    fn set_state(&mut self, sender: &str, id: &str, state: State, ack_pending: bool, now: Now) {
        let at_ms = now.wall.timestamp_millis();
        if let Some(seq) = self.ledger.set_state(sender, id, state, ack_pending, at_ms) {
            self.store(StoreOp::State {
                seq,
                sender: sender.to_owned(),
                id: id.to_owned(),
                state: state.as_str().to_owned(),
                detail: None,
                at_ms,
            });
        }
    }

    /// A committed delivery was cut short: audit the loss and bounce it to its sender.
    fn lose(&mut self, conn: ConnId, env: Queued, reason: &str, now: Now) {
        let bounced = env.kind != Envelope::BOUNCE_KIND;
        let state = if bounced { State::Bounced } else { State::Lost };
        self.settle_gone(&env, state, reason, now);
        self.outputs.push_back(Output::Audit(AuditEvent::Lost {
            conn,
            id: env.id.clone(),
            to: env.to.clone(),
            reason: reason.to_owned(),
            bounced,
        }));
        if !bounced {
            return; // a lost bounce is not bounced again
        }
        self.stage_bounce(&env, reason, None, now);
    }

    /// Stages the hub's notice to `env`'s sender that `env` is gone (SPEC §5.3): kind
    /// `bounce`, `from` hub, `correlationId` the lost envelope's id. It waives the caps. A
    /// bounce for an envelope given up after its deliveries (SPEC §12.2) also says how many.
    pub(super) fn stage_bounce(
        &mut self,
        env: &Queued,
        reason: &str,
        attempts: Option<u32>,
        now: Now,
    ) {
        let attempts = attempts.map_or_else(String::new, |n| format!(",\"attempts\":{n}"));
        let body = format!(
            "{{\"id\":{},\"to\":{},\"reason\":{}{attempts}}}",
            crate::wire::to_json(&env.id),
            crate::wire::to_json(&env.to),
            crate::wire::to_json(reason)
        );
        let bounce = Envelope::new(
            self.ids.next_id(),
            HUB_NAME.to_owned(),
            env.from.clone(),
            now.wall.to_rfc3339_opts(SecondsFormat::Millis, true),
            Envelope::BOUNCE_KIND.to_owned(),
            Some(env.id.clone()),
            body,
        )
        .expect("the bounce body is built from JSON strings");
        let digest = ledger::digest(
            &bounce.to,
            &bounce.kind,
            bounce.correlation_id.as_deref(),
            bounce.body.get(),
        );
        let mut queued = queued_from(&bounce);
        queued.seq = self.take_seq();
        self.staged.push(Staged {
            conn: None,
            from_peer: None,
            env: queued,
            target: Target::Queue { reserved: false },
            digest,
        });
    }

    // ----- replies and bookkeeping -----

    fn write(&mut self, conn: ConnId, line: &HubLine) {
        // Nothing goes to a connection the IO layer released (a batch's outcome can come
        // after its sender left).
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.errored |= matches!(line, HubLine::Error { .. });
        self.outputs.push_back(Output::Write {
            conn,
            line: line.encode(),
        });
    }

    /// Sends the connection's final line; the exchange is over (`end_exchange`).
    fn reply(&mut self, conn: ConnId, line: &HubLine, outcome: &str, now: Now) {
        self.write(conn, line);
        self.log(conn, outcome, "", now);
        self.end_exchange(conn, now);
    }

    /// Sends an error line (always the last line) and closes.
    pub(super) fn fail(&mut self, conn: ConnId, message: &str, now: Now) {
        self.write(
            conn,
            &HubLine::Error {
                message: message.to_owned(),
            },
        );
        self.log(conn, "error", message, now);
        self.finish(conn);
    }

    pub(super) fn finish(&mut self, conn: ConnId) {
        self.set_deadline(conn, None);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        // A claimed waiter becomes Done too: once closed it must take no more input, and
        // `accept` routes the envelope of a waiter that is no longer Claimed elsewhere.
        if !matches!(c.phase, Phase::Delivering { .. } | Phase::AckStaged) {
            c.phase = Phase::Done;
        }
        let linger = c.errored;
        self.outputs.push_back(Output::Close { conn, linger });
    }

    pub(super) fn set_deadline(&mut self, conn: ConnId, deadline: Option<Instant>) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if let Some(old) = c.deadline.take() {
            self.deadlines.remove(&(old, conn));
        }
        if let Some(at) = deadline {
            c.deadline = Some(at);
            self.deadlines.insert((at, conn));
        }
    }

    fn log(&mut self, conn: ConnId, outcome: &str, detail: &str, now: Now) {
        if let Some(c) = self.conns.get(&conn) {
            let line = service_line(c, conn, outcome, detail, now);
            self.outputs.push_back(Output::Log(line));
        }
    }

    fn log_conn(&mut self, c: &Conn, conn: ConnId, outcome: &str, detail: &str, now: Now) {
        let line = service_line(c, conn, outcome, detail, now);
        self.outputs.push_back(Output::Log(line));
    }
}

pub use commit::{flush_failed_refusal, store_backlog_refusal, Batch};

/// A connection's service-log line. Its detail is an error or close reason with every quoted
/// span left out (`pipeline::redact_quoted`): the ids and names some error texts quote come
/// from clients and peers, and the service log holds none of their values (SPEC §8.2).
fn service_line(c: &Conn, conn: ConnId, outcome: &str, detail: &str, now: Now) -> String {
    let elapsed_us = now.mono.saturating_duration_since(c.opened).as_micros();
    let name = c.name.as_deref().unwrap_or("-");
    let detail = pipeline::redact_quoted(detail);
    if detail.is_empty() {
        format!(
            "conn={conn} name={name} verb={} outcome={outcome} elapsed_us={elapsed_us}",
            c.verb
        )
    } else {
        format!(
            "conn={conn} name={name} verb={} outcome={outcome} elapsed_us={elapsed_us} detail={:?}",
            c.verb, detail
        )
    }
}

/// The router's form of an envelope: routing fields plus the canonical text.
fn queued_from(env: &Envelope) -> Queued {
    Queued {
        id: env.id.clone(),
        from: env.from.clone(),
        to: env.to.clone(),
        kind: env.kind.clone(),
        correlation_id: env.correlation_id.clone(),
        text: Arc::from(env.to_json()),
        seq: 0, // stamped at staging
        attempts: 0,
    }
}

#[cfg(test)]
mod tests;
