//! The sans-IO hub core (SPEC §4–§5): each connection's protocol state (hello → ok → one
//! verb → one reply), authentication, routing through the `Router`, deadlines as data, the
//! staging of sends until their audit record is written, delivery outcomes and bounces.
//!
//! Inputs are `handle_*` with the time passed in; outputs are drained with `poll_output`; the
//! next deadline is `poll_timeout`. Refuses: sockets, files, clocks, threads. The mio loop in
//! `event_loop` only moves bytes and applies outputs.
//!
//! The house (PLAN.md §14 "Sub-machines"). This file holds the `Hub`, its constructor and its
//! entry points, and registers the rooms, which come in four kinds:
//! - leaves, which import no other room but leaves: the vocabulary (`event`: `Output`, its
//!   payloads and the audit records; `durable`: what the store is asked to keep; `limits`;
//!   `conn_map`: `ConnId`; `id_key`; `names`; `pipeline`: held input) and the data
//!   structures everything is kept in (`ledger`, `router` with `queue_index`, `outbox`);
//! - machines, each a struct that owns its state, with its own methods and tests, held by the
//!   hub and called by it; a machine imports leaves and the machines it holds, never the
//!   hub: `settings` (roster, limits, operators), `conns` (connections, their deadlines, the
//!   `strangers`' books, the status waits of `receipts`), `commit` (staging, acceptance
//!   order, batches, held replies), `memory` (the ledger, its purge, the reasons of gone
//!   envelopes), `presence` (last seen, `liveness`, `recent`, `remote_presence`), `forward`
//!   (mail across hubs, §15), `leases` (issue 39: claims, waiters, expiry); the router, the
//!   task book and the id source are held as they are;
//! - functions over the machines they drive: the verbs, one file each in `verbs`, and the
//!   other steps that span machines without being the hub's (`admit`: a new envelope's
//!   checks and staging; `recipient`: the `warning` of `accepted`; `tasks`: delegated work's
//!   glue as `TaskWork`; `roster_reload`; `restore`: the restart's sink);
//! - the hub's own glue, `impl Hub` besides this file: `session` (the dispatcher: a line to
//!   its verb, a connection's lifecycle), `routing` (an envelope's path across the machines,
//!   forwarding's traffic) and `settle` (a batch's result carried out).
//!
//! No room imports this file but the glue.

// Leaves.
mod conn_map;
pub mod durable;
pub mod event;
mod id_key;
pub mod ledger;
pub mod limits;
mod names;
mod outbox;
mod pipeline;
mod queue_index;
pub mod router;
// Machines.
mod commit;
mod conns;
pub mod forward;
pub mod leases;
pub mod liveness;
mod memory;
mod presence;
mod receipts;
mod recent;
pub mod remote_presence;
mod settings;
mod strangers;
// Functions over machines: the verbs, and steps that span machines.
mod admit;
mod recipient;
mod restore;
pub mod roster_reload;
mod tasks;
mod verbs;
// The hub's glue.
mod routing;
mod session;
mod settle;

pub use commit::{flush_failed_refusal, store_backlog_refusal};
pub use conn_map::{ConnId, ConnMap};
pub use event::{AuditEvent, Batch, Output, PeerSend, WatchedProcess};
pub use id_key::Id;
pub use names::Name;
pub use restore::Restoring;
pub use roster_reload::RosterChange;
pub use router::{Filter, MailboxStats, Parked, Queued, Router, Work};
pub use strangers::{
    STRANGER_RECORD_BURST, STRANGER_RECORD_REFILL, STRANGER_SUMMARY_INTERVAL, SUMMARY_MAX_NAMES,
};

use crate::kernel::ids::IdSource;
use crate::kernel::now::Now;
use crate::roster::Roster;
use crate::tasks::TaskBook;
use durable::StoreOp;
use limits::Limits;
use std::time::Instant;

/// The hub core. One per server; every method is synchronous and cheap.
#[derive(Debug)]
pub struct Hub {
    /// The roster, `[limits]` and `operators` (`settings`).
    settings: settings::Settings,
    /// The connections, their deadlines, the strangers' books and the parked status waits
    /// (`conns`).
    conns: conns::Conns,
    /// The queues and parked awaits (`router`).
    router: Router,
    /// Staged work, acceptance order, batches and their results, held replies (`commit`).
    commit: commit::Commits,
    /// The ledger of accepted ids, its purge and the reasons of gone envelopes (`memory`).
    memory: memory::Memory,
    /// Last seen and delivered, liveness, the last envelopes, peers' names (`presence`).
    presence: presence::PresenceBook,
    /// Mail across hubs (SPEC §15), when the relay has forwarding peers.
    forwarding: Option<forward::Forwarding>,
    /// Delegated work (docs/delegation.md), when `[tasks]` is configured.
    tasks: Option<TaskBook>,
    /// Ids for the hub's own envelopes.
    ids: Box<dyn IdSource>,
    /// Leases and their waiters (issue 39, lease design §A; `leases`).
    leases: leases::Leases,
    /// What the core asks of the IO layer, in order (`outbox`).
    outputs: outbox::Outbox,
}

impl Hub {
    /// A hub with no connections. `ids` makes the ids of the hub's own envelopes (bounces):
    /// the core draws nothing random itself (`ids`).
    pub fn new(roster: Roster, limits: Limits, ids: Box<dyn IdSource>) -> Hub {
        let settings = settings::Settings::new(roster, limits);
        let router = settings.new_router();
        let ledger = settings.new_ledger();
        Hub {
            settings,
            conns: conns::Conns::default(),
            router,
            commit: commit::Commits::default(),
            memory: memory::Memory::new(ledger),
            presence: presence::PresenceBook::default(),
            forwarding: None,
            tasks: None,
            ids,
            leases: leases::Leases::new(leases::LeaseConfig::default()),
            outputs: outbox::Outbox::default(),
        }
    }

    /// The `[leases]` table in force (lease design §0 "Config"); without it, the defaults.
    pub fn with_leases(mut self, config: leases::LeaseConfig) -> Hub {
        self.leases = leases::Leases::new(config);
        self
    }

    /// Active leases and waiting claims now (tests, the operator's view).
    pub fn lease_counts(&self) -> (usize, usize) {
        self.leases.counts()
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
        self.commit.set_durable(durable);
        self
    }

    /// Expires every deadline at or before `now`. The loop calls it once per iteration.
    pub fn handle_timeout(&mut self, now: Now) {
        self.commit.new_round();
        self.expire_conns(now);
        self.conns.sum_strangers(&mut self.outputs, now, false);
        self.expire_forwards(now);
        let (mut work, out) = self.task_work();
        work.expire(now, out);
        let roster = &self.settings.roster;
        self.presence
            .liveness
            .expire(now, roster, &mut self.outputs);
        self.expire_leases(now);
        for (sender, id, seq) in self.memory.purge_due(now) {
            self.commit.store(StoreOp::Forget { seq, sender, id });
        }
    }

    /// The hub is about to exit: the `shutdown` record, with what is still queued, goes last,
    /// after every loss, bounce and requeue the shutdown itself caused (SPEC §4.6, §8.1).
    pub fn stopped(&mut self) {
        let queued = self.router.total_queued();
        // Leases are kept in memory until the store's schema 7 (lease design §A.9): say what
        // the stop drops, so nobody takes a restart for a release.
        let (leases, waiters) = self.leases.counts();
        if leases + waiters > 0 {
            self.outputs.log(format!(
                "leases: {leases} leases and {waiters} waiting claims dropped at stop (leases are kept in memory; a restart does not restore them)"
            ));
        }
        self.outputs.audit(AuditEvent::Shutdown { queued });
    }

    /// Renews, warns and expires the leases due at `now` (lease design §A.4): an owner is
    /// live while a roster name is `busy`, `idle` or `waiting`, or a task has not ended.
    fn expire_leases(&mut self, now: Now) {
        if !self.leases.poll_timeout().is_some_and(|at| at <= now.mono) {
            return;
        }
        let (liveness, router, book) = (&self.presence.liveness, &self.router, self.tasks.as_ref());
        let live = |owner: &str| {
            if crate::kernel::names::is_task_name(owner) {
                return book.is_some_and(|b| b.is_live_task(owner));
            }
            router.stats(owner).parked > 0
                || liveness
                    .known(owner)
                    .is_some_and(|k| k.state != liveness::TurnState::Gone)
        };
        self.leases.handle_timeout(now, &live, &mut *self.ids);
        self.stage_leases(now);
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
            self.conns.poll_timeout(),
            self.memory.poll_timeout(),
            self.forwarding
                .as_ref()
                .and_then(forward::Forwarding::poll_timeout),
            self.commit.poll_timeout(),
            self.presence.liveness.poll_timeout(),
            self.leases.poll_timeout(),
            self.conns.strangers_due(),
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
    pub fn handle_process_exited(&mut self, name: &str, process: WatchedProcess, now: Now) {
        let liveness = &mut self.presence.liveness;
        if liveness.process_exited(name, process, now, &mut self.outputs) {
            // Its leases end with its process (lease design §A.5).
            self.lease_owner_gone(name, leases::Gone::Holder, now);
        }
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

    /// A heartbeat of `peer`'s lasting link, for placement (issue 38 design §4): its room
    /// (feature `headroom`, either dialect), its instant and the agents the peer offers. The
    /// book keeps it (`tasks::placement::Rooms`); without `[tasks]` it is dropped.
    pub fn peer_room(&mut self, peer: &str, beat: crate::tasks::placement::Beat) {
        if let Some(book) = self.tasks.as_mut() {
            book.peer_room(peer, beat);
        }
    }

    /// This machine's figures, measured off the loop every 10 s (placement weighs this hub
    /// by them beside its running vs `tasks.max_concurrent`).
    pub fn local_room(&mut self, machine: crate::tasks::placement::Machine) {
        if let Some(book) = self.tasks.as_mut() {
            book.local_room(machine);
        }
    }

    pub fn remote_presence(&self) -> &remote_presence::RemotePresence {
        &self.presence.remote
    }

    /// This hub's own roster names as its heartbeats state them (docs/relay-protocol.md §5):
    /// parked awaits, queue length, and the liveness `who` shows. Never a peer's entry.
    pub fn local_directory(&self) -> Vec<(String, crate::relay::message::AgentEntry)> {
        remote_presence::directory(self.local_presence().agents)
    }

    // ----- commits (SPEC §12.1; `commit`, `settle`) -----

    /// With `sync`, committed batches wait for `handle_synced` before their `accepted` and
    /// `acked` replies go out (`store.sync = "full"`, SPEC §12.1).
    pub fn with_sync(mut self, sync: bool) -> Hub {
        self.commit.sync = sync;
        self
    }

    /// The loop reached its commit point (after the input of an iteration, and again after
    /// socket writes produced more work): if anything waits and nothing holds it back, the
    /// core emits the next `Output::Commit`. `store_holds` says the store cannot take a commit
    /// now (a checkpoint that must copy the whole WAL runs; `store::flush`).
    pub fn handle_commit_point(&mut self, now: Now, store_holds: bool) {
        // The permission prompts decided since the last commit point are answered first
        // (`session::answer_prompts`, issue 37 design §6).
        self.answer_prompts(now);
        // A task whose outcome is staged: its leases end in the same batch (design §A.5).
        for task in self.commit.take_ended_tasks() {
            self.lease_owner_gone(&task, leases::Gone::TaskEnded, now);
        }
        let max = self.settings.limits.store_backlog_max_bytes;
        let ledger = &self.memory.ledger;
        self.commit
            .commit_point(now, store_holds, max, ledger, &mut self.outputs);
    }

    /// Sends, bounces or acks wait for a batch.
    pub fn has_staged(&self) -> bool {
        self.commit.has_staged()
    }

    /// Anything waits for a batch: staged sends, acks, or changes that gate nothing.
    pub fn has_commit_work(&self) -> bool {
        self.commit.has_commit_work()
    }

    /// Sends (or bounces) wait for a batch, or are in the one being written.
    pub fn has_staged_sends(&self) -> bool {
        self.commit.has_staged_sends()
    }

    /// A batch was emitted and its result is not reported yet.
    pub fn commit_in_flight(&self) -> bool {
        self.commit.in_flight()
    }

    /// The error of the first failed flush, if one failed: from then on sends are refused
    /// until a restart (SPEC §12.1).
    pub fn flush_failed(&self) -> Option<&str> {
        self.commit.flush_failed()
    }

    /// Replies waiting for the store's flush.
    pub fn held_replies(&self) -> usize {
        self.commit.held_replies()
    }

    /// What `who` and `activity` read (`verbs::View`).
    fn view(&self) -> verbs::View<'_> {
        verbs::View {
            settings: &self.settings,
            conns: &self.conns,
            router: &self.router,
            presence: &self.presence,
            memory: &self.memory,
            tasks: self.tasks.as_ref(),
            forwarding: self.forwarding.as_ref(),
        }
    }

    // ----- presence and activity (SPEC §14, §14.1; `verbs::who`, `verbs::activity`) -----

    /// Every roster name with its parked awaits (oldest first), queue length, and when it was
    /// last seen and last delivered to, then the linked peers' names (SPEC §14). This is the
    /// operator's view; `presence_for` is what an asker gets.
    pub fn presence(&self) -> crate::wire::Presence {
        verbs::who::presence(self.view())
    }

    /// `presence` as `asker` may see it (SPEC §14 "Visibility", `verbs::who::presence_for`).
    pub fn presence_for(&self, asker: &str) -> crate::wire::Presence {
        verbs::who::presence_for(self.view(), asker)
    }

    /// The roster names alone, as `presence` lists them first.
    pub fn local_presence(&self) -> crate::wire::Presence {
        verbs::who::local(self.view())
    }

    /// The queues of names nobody holds as `asker` may see them (`verbs::who::off_roster_for`;
    /// `asker` None: the operator's view).
    pub fn off_roster_for(&self, asker: Option<&str>) -> Vec<crate::wire::OffRosterQueue> {
        verbs::who::off_roster_for(self.view(), asker)
    }

    /// The whole `activity` answer (the operator's view, `verbs::activity`).
    pub fn activity(&self) -> crate::wire::Activity {
        verbs::activity::activity(self.view())
    }

    /// `activity` as `asker` may see it (`verbs::activity::activity_for`).
    pub fn activity_for(&self, asker: &str) -> crate::wire::Activity {
        verbs::activity::activity_for(self.view(), asker)
    }

    /// The peer hub `to` belongs to: `name@peer` (split at the last `@`) where `peer` is a
    /// forwarding peer and `to` is not itself a roster name. A roster name always stays
    /// local, so no address that works without forwarding changes meaning.
    pub fn remote_peer(&self, to: &str) -> Option<String> {
        verbs::remote_peer(self.forwarding.as_ref(), &self.settings.roster, to)
    }

    /// Enables forwarding (SPEC §15): `local_peer` is this hub's relay peer id, `peers` those
    /// configured with `forward = true`, `window` the most envelopes unacked per peer.
    pub fn enable_forwarding(
        &mut self,
        local_peer: &str,
        peers: impl IntoIterator<Item = String>,
        window: usize,
    ) {
        let ack_timeout = self.settings.limits.ack_timeout();
        self.forwarding = Some(forward::Forwarding::new(
            local_peer,
            peers,
            window,
            ack_timeout,
        ));
    }

    // ----- restart (SPEC §12.1; `restore`) -----

    /// A sink that restores the store's rows into this hub (SPEC §12.1), row by row in
    /// acceptance order. An envelope delivered in ack mode and never acked is queued again.
    pub fn restoring(&mut self, now: Now) -> Restoring<'_> {
        let (memory, router, commit) = (&mut self.memory, &mut self.router, &mut self.commit);
        Restoring::new(memory, router, commit, &self.settings.limits, now)
    }

    /// Rebuilds queues and the ledger from the owned lists (tests; the server streams rows
    /// through `restoring` instead; `Restoring::restore`).
    pub fn restore(&mut self, loaded: durable::Loaded, now: Now) {
        self.restoring(now).restore(loaded);
    }

    /// Gives up the queues and the ledger without freeing them, for a process about to exit
    /// (the server's orderly stop, after everything is committed, flushed and logged): a hub
    /// holding a million envelopes spent seconds freeing them one by one, memory the exit
    /// returns at once (docs/performance.md "Restart"). The hub is left
    /// empty and usable. Nothing else is lost: the core holds no file or socket, and what the
    /// queues held is in the store.
    pub fn forget_held(&mut self) {
        let router = self.settings.new_router();
        let ledger = self.settings.new_ledger();
        std::mem::forget(std::mem::replace(&mut self.router, router));
        std::mem::forget(std::mem::replace(&mut self.memory.ledger, ledger));
    }

    // ----- the roster (SIGHUP; `roster_reload`) -----

    /// Takes `roster` in place of the current one and closes what the change revokes
    /// (`roster_reload`). Emits one service-log line naming what changed (never a token).
    /// A name of `tasks.approvers` the new roster no longer holds is dropped from them, with
    /// an ERROR line naming it (issue 37 design §5; it stays dropped until the next start).
    pub fn replace_roster(&mut self, roster: Roster, now: Now) -> RosterChange {
        let (settings, conns, router) = (&mut self.settings, &mut self.conns, &mut self.router);
        let change =
            roster_reload::replace(settings, conns, router, &mut self.outputs, roster, now);
        if let Some(book) = self.tasks.as_mut() {
            let roster = &self.settings.roster;
            for name in book.retain_approvers(|n| roster.contains(n)) {
                self.outputs.log_error(format!(
                    "tasks.approvers: {name} is no longer on the roster; dropped from the approvers until the hub starts again"
                ));
            }
        }
        change
    }

    /// The roster in force.
    pub fn roster(&self) -> &Roster {
        &self.settings.roster
    }

    // ----- delegated work (docs/delegation.md; `tasks`) -----

    /// The machines delegated work drives, and the outbox (`tasks::TaskWork`).
    fn task_work(&mut self) -> (tasks::TaskWork<'_>, &mut outbox::Outbox) {
        let work = tasks::TaskWork {
            book: self.tasks.as_mut(),
            ids: &mut *self.ids,
            commit: &mut self.commit,
            router: &mut self.router,
            memory: &self.memory,
        };
        (work, &mut self.outputs)
    }

    /// Turns delegation on (a `[tasks]` table): `book` holds the runnable agents.
    pub fn with_tasks(mut self, book: TaskBook) -> Hub {
        self.tasks = Some(book);
        self
    }

    /// Turns delegation on in a running hub (the server, once its executor exists).
    pub fn enable_tasks(&mut self, book: TaskBook) {
        self.tasks = Some(book);
    }

    /// The agents this hub can run from now on (the manifests read again on SIGHUP): later
    /// delegations are checked against them; tasks already accepted are not touched, since
    /// the executor resolves a task's agent when it starts it. Without `[tasks]`, nothing.
    pub fn set_task_agents(&mut self, agents: Vec<String>) {
        if let Some(book) = self.tasks.as_mut() {
            book.set_agents(agents);
        }
    }

    /// What each runnable agent's tasks report of their usage (issue 38 design §1), set
    /// with the agents: a budget is checked against it at the verb.
    pub fn set_task_reports(&mut self, reports: Vec<(String, crate::acp::Reports)>) {
        if let Some(book) = self.tasks.as_mut() {
            book.set_reports(reports);
        }
    }

    /// Rebuilds the task book from the store's rows at startup, the requests left open
    /// among them (`TaskWork::restore`).
    pub fn restore_tasks(
        &mut self,
        rows: Vec<crate::tasks::StoredTask>,
        requests: Vec<crate::tasks::StoredRequest>,
        now: Now,
    ) {
        let (mut work, out) = self.task_work();
        work.restore(rows, requests, now, out);
    }

    /// One event from a task's runner (the IO layer drains them after its waker fires).
    pub fn handle_task_event(&mut self, task: &str, event: crate::tasks::TaskEvent, now: Now) {
        let (mut work, out) = self.task_work();
        work.event(task, event, now, out);
    }

    /// Tasks whose outcome has not come in yet (the drain waits for them).
    pub fn active_tasks(&self) -> usize {
        self.tasks.as_ref().map_or(0, TaskBook::active)
    }

    /// The lasting relay link with `peer` came up or went down, with what it can do
    /// (`LinkTerms`: an agent-hub peer, which reads `agent` and acks handoffs, never a
    /// claudectl; whether it agreed `task-approvals`; `TaskWork::peer_link`). A link that goes
    /// down takes what its peer's directory said with it.
    pub fn handle_peer_link(
        &mut self,
        peer: &str,
        up: bool,
        terms: crate::tasks::LinkTerms,
        now: Now,
    ) {
        if !up {
            self.presence.remote.forget(peer);
        }
        let (mut work, out) = self.task_work();
        work.peer_link(peer, up, terms, now, out);
    }

    /// A task message (`delegate_task`, `task_status`, `task_handoff`, `task_interrupt`; the
    /// `task-approvals` three) from an authenticated connection of `peer`; `msg_id` is its
    /// relay message id.
    pub fn handle_peer_message(
        &mut self,
        peer: &str,
        msg_id: &str,
        payload: crate::relay::message::Payload,
        now: Now,
    ) {
        let stopping = self.conns.shutting_down();
        let (mut work, out) = self.task_work();
        work.peer_message(stopping, peer, msg_id, payload, now, out);
    }

    /// A v1 peer acked our final handoff of its task `task_id`.
    pub fn handle_peer_task_acked(&mut self, peer: &str, task_id: &str) {
        if let Some(book) = self.tasks.as_mut() {
            book.handle_peer_acked(peer, task_id);
        }
    }

    // ----- connections (SPEC §4; `conns`, `session`) -----

    /// Status waits parked now (tests and the operator's view).
    pub fn parked_status_waits(&self) -> usize {
        self.conns.parked_status_waits()
    }

    /// Permission prompts parked now, waiting for their decision (issue 37 design §6).
    pub fn parked_prompts(&self) -> usize {
        self.conns.parked_prompts()
    }

    /// Open connections that have not authenticated (`limits.max_unauthenticated` bounds them
    /// through the IO layer, SPEC §4.6).
    pub fn unauthenticated(&self) -> usize {
        self.conns.unauthenticated()
    }

    /// The oldest open connection that has not authenticated: the one the IO layer closes to
    /// make room for a newer connection (SPEC §4.6).
    pub fn oldest_unauthenticated(&self) -> Option<ConnId> {
        self.conns.oldest_unauthenticated()
    }

    /// Whether `conn` still waits for its hello: its lines are capped at
    /// `wire::HELLO_MAX_LINE_BYTES` (SPEC §2.1) until it has one.
    pub fn awaits_hello(&self, conn: ConnId) -> bool {
        self.conns.awaits_hello(conn)
    }

    /// A stopping hub writes what it counted, ahead of its `shutdown` record (SPEC §4.6).
    pub fn flush_strangers(&mut self, now: Now) {
        self.conns.sum_strangers(&mut self.outputs, now, true);
    }

    /// Connections the core still tracks.
    pub fn open_connections(&self) -> usize {
        self.conns.len()
    }
}

#[cfg(test)]
mod tests;
