//! The hub's side of delegated work (docs/delegation.md): the task book's instructions turned
//! into staged commits and outputs, the runner's events and relay peers' task messages and
//! link changes fed to the book ("Across hubs"), and the task identities' place in
//! authentication.
//!
//! Owns the glue only, as methods of `TaskWork`, the machines delegated work drives (the
//! book, the ids it draws from, the staging and the router its envelopes are named by, the
//! memory that says whether a progress envelope still waits). The book (`crate::tasks`)
//! decides every task's state; the commit (`commit`) decides batches. What this file
//! guarantees is the pairing the book asks for: an outcome envelope and its task's final
//! state go into one batch (`Staged::rider`), a `delegated` reply waits for the commit of its
//! task's row, an agent is started only after the commit of its task's `running` state
//! (`StagedTask`), and a message to a peer (a `delegate_task`, a status, a final handoff, the
//! ack of a peer's handoff) leaves only after the commit of the step that made it, so a peer
//! never hears of a task, or of an outcome, this hub could lose in a crash. Refuses IO.

use super::commit::Commits;
use super::event::{Output, PeerSend};
use super::memory::Memory;
use super::outbox::Outbox;
use super::router::Router;
use crate::kernel::ids::IdSource;
use crate::kernel::now::Now;
use crate::relay::message::Payload;
use crate::tasks::peer_refusal as refusal_handoff;
use crate::tasks::{LinkTerms, StoredRequest, StoredTask, TaskBook, TaskEvent, TaskId};

/// What delegated work drives: the task book (None without `[tasks]`), the ids it draws task
/// ids and tokens from, the staging its commits go to, the router its envelopes are named
/// by, and the memory of accepted ids (whether an earlier progress envelope still waits).
pub(super) struct TaskWork<'a> {
    pub(super) book: Option<&'a mut TaskBook>,
    pub(super) ids: &'a mut dyn IdSource,
    pub(super) commit: &'a mut Commits,
    pub(super) router: &'a mut Router,
    pub(super) memory: &'a Memory,
}

impl TaskWork<'_> {
    /// Carries out every instruction the book queued (`Commits::stage_task_actions`).
    pub(super) fn drain(&mut self, out: &mut Outbox) {
        if let Some(book) = self.book.as_deref_mut() {
            self.commit.stage_task_actions(book, self.router, out);
        }
    }

    /// Starts what the book can start now, then carries out its instructions.
    pub(super) fn start(&mut self, now: Now, out: &mut Outbox) {
        if let Some(book) = self.book.as_deref_mut() {
            book.start_ready(now, self.ids);
        }
        self.drain(out);
    }

    /// Rebuilds the task book from the store's rows at startup (docs/delegation.md
    /// "Durability"): the `expired` envelopes of requests left open (issue 37 design §4.6) and
    /// outcome envelopes of tasks that were running are staged for the first batch, queued tasks start as slots allow (after that batch), and every task that was
    /// running with a known process group is named for the IO layer to make sure it is gone.
    pub(super) fn restore(
        &mut self,
        rows: Vec<StoredTask>,
        requests: Vec<StoredRequest>,
        now: Now,
        out: &mut Outbox,
    ) {
        let Some(book) = self.book.as_deref_mut() else {
            return;
        };
        let orphans: Vec<(String, u32)> = rows
            .iter()
            .filter(|r| matches!(r.state.as_str(), "running" | "cancelling"))
            .filter_map(|r| r.pid.map(|pid| (r.task.clone(), pid)))
            .collect();
        book.restore(rows, requests, now, self.ids);
        for (task, pid) in orphans {
            out.push(Output::KillOrphan { task, pid });
        }
        self.start(now, out);
    }

    /// One event from a task's runner (the IO layer drains them after its waker fires).
    pub(super) fn event(&mut self, task: &str, event: TaskEvent, now: Now, out: &mut Outbox) {
        let Some(id) = TaskId::parse(task) else {
            return;
        };
        let ended = matches!(event, TaskEvent::Ended(_));
        if let TaskEvent::Log(log) = &event {
            // The session's and runner's lines hold no prompt, text or secret (runner docs).
            let line = format!("task {id}: {}", log.message);
            out.push(match log.level {
                crate::acp::Level::Info => Output::Log(line),
                _ => Output::LogError(line),
            });
            return;
        }
        let Some(book) = self.book.as_deref_mut() else {
            return;
        };
        let memory = self.memory;
        let pending = |envelope_id: &str| memory.hub_envelope_queued(envelope_id);
        book.handle_event(&id, event, now, self.ids, &pending);
        self.drain(out);
        if ended {
            // A slot is free only once the process is reaped (docs/delegation.md).
            self.start(now, out);
        }
    }

    /// Progress envelopes held back by their interval (called from `handle_timeout`).
    pub(super) fn expire(&mut self, now: Now, out: &mut Outbox) {
        let Some(book) = self.book.as_deref_mut() else {
            return;
        };
        if !book.poll_timeout().is_some_and(|at| at <= now.mono) {
            return;
        }
        let memory = self.memory;
        let pending = |envelope_id: &str| memory.hub_envelope_queued(envelope_id);
        book.handle_timeout(now, self.ids, &pending);
        self.drain(out);
    }

    /// The hub is stopping: running tasks are asked to cancel; nothing new starts.
    pub(super) fn shutdown(&mut self, out: &mut Outbox) {
        if let Some(book) = self.book.as_deref_mut() {
            book.shutdown();
        }
        self.drain(out);
    }

    /// The lasting relay link with `peer` came up or went down, with what it can do
    /// (`LinkTerms`: an agent-hub peer, which reads `agent` and acks handoffs, never a
    /// claudectl of any proto; whether it carries requests, `task-approvals`), see
    /// `TaskBook::handle_peer_link`.
    pub(super) fn peer_link(
        &mut self,
        peer: &str,
        up: bool,
        terms: LinkTerms,
        now: Now,
        out: &mut Outbox,
    ) {
        let Some(book) = self.book.as_deref_mut() else {
            return;
        };
        book.handle_peer_link(peer, up, terms, now, self.ids);
        self.drain(out);
    }

    /// A task message (`delegate_task`, `task_status`, `task_handoff`, `task_interrupt`, and
    /// on a link that agreed `task-approvals` `task_request`, `task_answer`,
    /// `task_request_closed`) from an authenticated connection of `peer`; `msg_id` is its
    /// relay message id. A stopping hub (`stopping`) refuses a delegation.
    pub(super) fn peer_message(
        &mut self,
        stopping: bool,
        peer: &str,
        msg_id: &str,
        payload: Payload,
        now: Now,
        out: &mut Outbox,
    ) {
        let Some(book) = self.book.as_deref_mut() else {
            if let Payload::DelegateTask(d) = &payload {
                // Never silence: the delegating peer hears why (claudectl shows it), as a
                // task that could not start (`refused: true`, docs/delegation.md "Across
                // hubs").
                self.commit.stage_peer_send(PeerSend {
                    peer: peer.to_owned(),
                    payload: Payload::TaskHandoff(refusal_handoff(
                        &d.task_id,
                        "delegation is not enabled on this hub",
                    )),
                    handoff: None,
                });
                out.log(format!(
                    "relay: {peer} sent delegate_task; refused: delegation is not enabled on this hub"
                ));
            } else {
                out.log(format!(
                    "relay: {peer} sent {}; this hub runs no delegated work",
                    payload.msg_type().as_str()
                ));
            }
            return;
        };
        if stopping {
            if let Payload::DelegateTask(d) = &payload {
                self.commit.stage_peer_send(PeerSend {
                    peer: peer.to_owned(),
                    payload: Payload::TaskHandoff(refusal_handoff(
                        &d.task_id,
                        "the hub is shutting down",
                    )),
                    handoff: None,
                });
                return;
            }
        }
        let memory = self.memory;
        let pending = |envelope_id: &str| memory.hub_envelope_queued(envelope_id);
        book.handle_peer_message(peer, msg_id, payload, now, self.ids, &pending);
        self.drain(out);
        self.start(now, out);
    }
}

/// Whether `name`/`token` authenticate a live task identity (docs/delegation.md "Task
/// identity").
pub(super) fn verify_identity(book: Option<&TaskBook>, name: &str, token: &str) -> bool {
    book.is_some_and(|b| b.verify_identity(name, token).is_some())
}
