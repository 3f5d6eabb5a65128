//! The sans-IO hub core (SPEC §4–§5): each connection's protocol state (hello → ok → one
//! verb → one reply), authentication, routing through the `Router`, deadlines as data, the
//! staging of sends until their audit record is written, delivery outcomes and bounces.
//!
//! Inputs are `handle_*` with the time passed in; outputs are drained with `poll_output`; the
//! next deadline is `poll_timeout`. Refuses: sockets, files, clocks, threads. The mio loop in
//! `server` only moves bytes and applies outputs.
//!
//! This file holds the `Hub` itself, its constructor, the deadline and output entry points and
//! the types the rooms share; each room has one job: `session` (one connection's protocol,
//! SPEC §2, §4), `verbs` (one file per verb: send, await, ack, status, who), `routing` (an
//! accepted envelope to a waiter or a queue, delivery, loss and bounce, SPEC §5.3), `pipeline`
//! (input held while a verb is pending, §4.3), `commit` (the batch lifecycle, §12.1),
//! `redelivery`, `forward` (§15), `restore` (startup from the store), `liveness` (§14),
//! `recipient` (the `warning` of `accepted`, §5.1), `admit`, `ledger`, `router`, `event`, `ids`.

mod admit;
mod commit;
mod conn_map;
pub mod durable;
// The kernel's hash maps (`kernel::fold_hash`), under the name the hub's files use.
pub(crate) use crate::kernel::fold_hash;
pub use conn_map::{ConnId, ConnMap};
pub mod event;
pub mod forward;
mod id_key;
/// The core's id source (`kernel::ids`), under the name the core's callers use.
pub use crate::kernel::ids;
pub mod ledger;
pub mod limits;
mod linger;
pub mod liveness;
mod memory;
mod names;
mod outbox;
mod peer_tasks;
mod pipeline;
mod presence;
mod queue_index;
mod receipts;
mod recent;
mod recipient;
mod redelivery;
pub mod remote_presence;
mod restore;
pub use restore::Restoring;
pub mod roster_reload;
pub mod router;
mod routing;
mod session;
mod settings;
mod strangers;
pub use strangers::{
    STRANGER_RECORD_BURST, STRANGER_RECORD_REFILL, STRANGER_SUMMARY_INTERVAL, SUMMARY_MAX_NAMES,
};
mod tasks;
mod verbs;

pub use event::{AuditEvent, Batch, Output, PeerSend};
pub use id_key::Id;
pub use names::Name;
pub use roster_reload::RosterChange;
pub use router::{Filter, MailboxStats, Parked, Queued, Router, Work};

use crate::hub::durable::StoreOp;
use crate::roster::Roster;
use crate::wire::HubLine;
use ledger::State;
use limits::Limits;
use session::{Conn, Phase};
use std::collections::{BTreeSet, VecDeque};
use std::time::Instant;

/// The time, passed in (`kernel::now`), under the name the core's callers use.
pub use crate::kernel::now::Now;

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
    /// Store changes and audit records written in the same batch as this envelope, or not
    /// at all: a task's final state rides with its outcome envelope (docs/delegation.md
    /// "Durability"), so neither is ever committed without the other.
    rider: Option<Box<Rider>>,
}

/// What rides with a staged envelope (`Staged::rider`).
#[derive(Debug, Default)]
struct Rider {
    store: Vec<StoreOp>,
    audit: Vec<AuditEvent>,
}

/// A task step with no envelope that must be committed before something follows from it
/// (docs/delegation.md "Durability"): a delegation before its `delegated` reply, a task's
/// `running` state before its agent is started.
#[derive(Debug)]
struct StagedTask {
    store: Vec<StoreOp>,
    audit: Vec<AuditEvent>,
    then: TaskThen,
}

#[derive(Debug)]
enum TaskThen {
    /// Answer the delegator's connection (`delegated`); on a failed commit, refuse it and
    /// withdraw the task.
    Reply {
        conn: ConnId,
        task: crate::tasks::TaskId,
    },
    /// Start the agent.
    Start(Box<crate::tasks::StartSpec>),
    /// Nothing waits for it (a state the book records, such as `cancelling`).
    Nothing,
    /// Messages to relay peers, sent once the step that caused them is durable
    /// (docs/delegation.md "Across hubs").
    ToPeer(Vec<PeerSend>),
}

/// An ack waiting for the commit that makes it durable (SPEC §12.2).
#[derive(Debug)]
struct StagedAck {
    conn: ConnId,
    env: Queued,
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
    /// The roster, `[limits]` and `operators` (`settings`).
    settings: settings::Settings,
    router: Router,
    /// Boxed: a map's table holds up to 2.3 times its entries' worth of slots, so an inline
    /// `Conn` (then 280 bytes) cost about 470 bytes per parked await at 10,000 of them
    /// (docs/performance.md, "W3: memory per parked await"); a box costs its own size. Keyed
    /// by the ids the IO layer hands out, so the cheap hasher serves (`hub::conn_map`).
    conns: conn_map::ConnMap<Box<Conn>>,
    deadlines: BTreeSet<(Instant, ConnId)>,
    staged: Vec<Staged>,
    /// What the core asks of the IO layer, in order (`outbox`).
    outputs: outbox::Outbox,
    shutting_down: bool,
    /// The next acceptance number (`Queued::seq`).
    next_seq: u64,
    staged_acks: Vec<StagedAck>,
    /// The ledger of accepted ids, its purge and the reasons of gone envelopes (`memory`).
    memory: memory::Memory,
    /// Whether store operations are wanted (a durable store is configured).
    durable: bool,
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
    /// Delegated work (docs/delegation.md), when `[tasks]` is configured.
    tasks: Option<crate::tasks::TaskBook>,
    /// Task steps waiting for a batch (`StagedTask`).
    staged_tasks: Vec<StagedTask>,
    /// Parked `status` waits (`receipts`).
    receipts: receipts::Waits,
    /// Last seen and delivered, liveness, the last envelopes, peers' names (`presence`).
    presence: presence::PresenceBook,
    /// Connections without an identity, connections per name, strangers' records
    /// (`strangers`, SPEC §4.6, §8.1).
    strangers: strangers::Strangers,
}

impl Hub {
    /// A hub with no connections. `ids` makes the ids of the hub's own envelopes (bounces):
    /// the core draws nothing random itself (`ids`).
    pub fn new(roster: Roster, limits: Limits, ids: Box<dyn ids::IdSource>) -> Hub {
        let settings = settings::Settings::new(roster, limits);
        let router = settings.new_router();
        let ledger = settings.new_ledger();
        Hub {
            settings,
            router,
            conns: conn_map::ConnMap::default(),
            deadlines: BTreeSet::new(),
            staged: Vec::new(),
            outputs: outbox::Outbox::default(),
            shutting_down: false,
            next_seq: 0,
            staged_acks: Vec::new(),
            memory: memory::Memory::new(ledger),
            durable: false,
            held: VecDeque::new(),
            unsynced: None,
            flush_failed: None,
            forwarding: None,
            commit: commit::Commits::default(),
            ids,
            tasks: None,
            staged_tasks: Vec::new(),
            receipts: receipts::Waits::default(),
            presence: presence::PresenceBook::default(),
            strangers: strangers::Strangers::default(),
        }
    }

    /// The config's `operators`: the names that get the operator's view of `who` and
    /// `activity` (SPEC §14 "Visibility").
    pub fn with_operators(mut self, operators: Vec<String>) -> Hub {
        self.settings.operators = operators;
        self
    }

    /// Asks for store operations in each `Output::Commit`: set when a durable store is
    /// configured.
    pub fn with_durable(mut self, durable: bool) -> Hub {
        self.durable = durable;
        self
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
                    let msg = format!(
                        "no hello within {} ms",
                        self.settings.limits.hello_timeout_ms
                    );
                    self.fail(conn, &msg, now);
                }
                Phase::Verb => {
                    let msg = format!("no verb within {} ms", self.settings.limits.verb_timeout_ms);
                    self.fail(conn, &msg, now);
                }
                Phase::Parked { parked, .. } => {
                    let parked = parked.clone();
                    self.router.unpark(&parked);
                    let name = parked.agent;
                    self.outputs.audit(AuditEvent::Timeout { conn, name });
                    self.reply(conn, &HubLine::Timeout, "timeout", now);
                }
                Phase::StatusWait { .. } => self.status_wait_timeout(conn, now),
                Phase::Delivering { ack: true, .. } => {
                    let msg = format!(
                        "no ack within {} ms; the envelope will be delivered again",
                        self.settings.limits.ack_timeout_ms
                    );
                    self.return_unacked(conn, &msg, now);
                }
                phase if linger::answered(phase) => self.answer_linger_over(conn),
                _ => {}
            }
        }
        self.sum_strangers(now, false);
        self.expire_forwards(now);
        self.expire_tasks(now);
        let roster = &self.settings.roster;
        self.presence
            .liveness
            .expire(now, roster, &mut self.outputs);
        for (sender, id, seq) in self.memory.purge_due(now) {
            self.store(StoreOp::Forget { seq, sender, id });
        }
    }

    /// The hub is about to exit: the `shutdown` record, with what is still queued, goes last,
    /// after every loss, bounce and requeue the shutdown itself caused (SPEC §4.6, §8.1).
    pub fn stopped(&mut self) {
        let queued = self.router.total_queued();
        self.outputs.audit(AuditEvent::Shutdown { queued });
    }

    /// Queued envelopes across all agents.
    pub fn total_queued(&self) -> usize {
        self.router.total_queued()
    }

    // ----- outputs -----

    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop()
    }

    /// The earliest deadline the core holds; the IO loop must call `handle_timeout` by then.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.deadlines.first().map(|&(at, _)| at),
            self.memory.poll_timeout(),
            self.forward_deadline(),
            self.commit_deadline(),
            self.presence.liveness.poll_timeout(),
            self.strangers.poll_timeout(),
            self.tasks
                .as_ref()
                .and_then(crate::tasks::TaskBook::poll_timeout),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Starts the periodic ledger purge (the loop calls this once it runs).
    pub fn start_purging(&mut self, now: Now) {
        self.memory.start_purging(now);
    }

    /// What the ledger's records are charged against `limits.idempotency_max_bytes`.
    pub fn ledger_bytes(&self) -> usize {
        self.memory.ledger.bytes()
    }

    /// Queue and waiter counts for one agent.
    pub fn stats(&self, agent: &str) -> MailboxStats {
        self.router.stats(agent)
    }

    pub fn router(&self) -> &Router {
        &self.router
    }

    // ----- presence (SPEC §14) -----

    /// The loop saw a process it was asked to check (`Output::CheckProcesses`) gone: its name
    /// becomes `gone`. Called for each exited one, then `handle_processes_checked`.
    pub fn handle_process_exited(
        &mut self,
        name: &str,
        process: liveness::WatchedProcess,
        now: Now,
    ) {
        let liveness = &mut self.presence.liveness;
        liveness.process_exited(name, process, now, &mut self.outputs);
    }

    /// The loop finished the check `Output::CheckProcesses` asked for: the next one is due a
    /// `PROCESS_CHECK_INTERVAL` from now while any process is still watched.
    pub fn handle_processes_checked(&mut self, now: Now) {
        self.presence.liveness.checked(now);
    }

    pub fn liveness(&self) -> &liveness::Liveness {
        &self.presence.liveness
    }

    /// A lasting link's peer applied a heartbeat: `agents` is its whole directory now.
    /// `peer` is the authenticated link's peer id.
    pub fn handle_peer_directory(
        &mut self,
        peer: &str,
        agents: std::collections::BTreeMap<String, crate::relay::message::AgentEntry>,
    ) {
        self.presence.remote.apply(peer, agents);
    }

    pub fn remote_presence(&self) -> &remote_presence::RemotePresence {
        &self.presence.remote
    }

    /// This hub's own roster names as its heartbeats state them (docs/relay-protocol.md §5):
    /// parked awaits, queue length, and the liveness `who` shows. Never a peer's entry.
    pub fn local_directory(&self) -> Vec<(String, crate::relay::message::AgentEntry)> {
        remote_presence::directory(self.local_presence().agents)
    }

    /// Connections the core still tracks.
    pub fn open_connections(&self) -> usize {
        self.conns.len()
    }
}

pub use commit::{flush_failed_refusal, store_backlog_refusal};

#[cfg(test)]
mod tests;
