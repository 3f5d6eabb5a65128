//! The work a commit batch carries (PLAN.md §2, "How a send becomes durable"): a staged send
//! and where it goes once committed, what rides with it, a task step with no envelope and
//! what follows its commit, an ack waiting for the commit that makes it durable, and a reply
//! held for the store's flush (SPEC §12.1, §12.2; docs/delegation.md "Durability").
//!
//! Owns the vocabulary only: `Commits` (`hub::commit`) keeps these until their batch's result
//! is known, and the hub's glue (`hub::settle`) carries out what each result means. Refuses
//! deciding anything.

use crate::hub::conn_map::ConnId;
use crate::hub::durable::StoreOp;
use crate::hub::event::{AuditEvent, PeerSend};
use crate::hub::router::Queued;
use crate::wire::HubLine;

/// Where a staged send goes once committed.
#[derive(Debug)]
pub(in crate::hub) enum Target {
    /// A waiter claimed at staging time (still `Phase::Claimed` unless it went away).
    Waiter(ConnId),
    /// The queue; `reserved` says whether cap room was reserved (bounces waive the caps).
    Queue { reserved: bool },
}

#[derive(Debug)]
pub(in crate::hub) struct Staged {
    /// The sender's connection; None for the hub's own bounces and for envelopes from peers.
    pub(in crate::hub) conn: Option<ConnId>,
    /// An envelope a peer hub forwarded: its peer id and the `bus_forward`'s relay message id,
    /// acked once the envelope is durable here (SPEC §15).
    pub(in crate::hub) from_peer: Option<(String, String)>,
    pub(in crate::hub) env: Queued,
    pub(in crate::hub) target: Target,
    /// For the ledger (idempotent resends).
    pub(in crate::hub) digest: [u8; 32],
    /// Store changes and audit records written in the same batch as this envelope, or not
    /// at all: a task's final state rides with its outcome envelope (docs/delegation.md
    /// "Durability"), so neither is ever committed without the other.
    pub(in crate::hub) rider: Option<Box<Rider>>,
}

/// What rides with a staged envelope (`Staged::rider`).
#[derive(Debug, Default)]
pub(in crate::hub) struct Rider {
    pub(in crate::hub) store: Vec<StoreOp>,
    pub(in crate::hub) audit: Vec<AuditEvent>,
}

/// A task step with no envelope that must be committed before something follows from it
/// (docs/delegation.md "Durability"): a delegation before its `delegated` reply, a task's
/// `running` state before its agent is started.
#[derive(Debug)]
pub(in crate::hub) struct StagedTask {
    pub(in crate::hub) store: Vec<StoreOp>,
    pub(in crate::hub) audit: Vec<AuditEvent>,
    pub(in crate::hub) then: TaskThen,
}

#[derive(Debug)]
pub(in crate::hub) enum TaskThen {
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
    /// A relay peer's answer to a request of a task it delegated here (issue 37 design §7):
    /// on the commit the request closes answered and the decision goes to the agent; on a
    /// failed commit the request is open again (nobody waits for a reply).
    PeerAnswer {
        request: String,
        decision: Box<crate::tasks::approvals::Decision>,
    },
    /// Messages to relay peers, sent once the step that caused them is durable
    /// (docs/delegation.md "Across hubs").
    ToPeer(Vec<PeerSend>),
    /// An answer to a task's request (issue 37, `task_answer`): on the commit, the request
    /// closes answered, the decision goes to the agent and `reply` to the answerer; on a
    /// failed commit the request is open again and the answerer refused.
    Answer {
        conn: ConnId,
        request: String,
        reply: crate::wire::approval::TaskAnswerReply,
        decision: Box<crate::tasks::approvals::Decision>,
    },
    /// A follow-up turn (issue 38, `task_prompt`): on the commit, the runner gets `go` (a
    /// `TaskAction::Prompt`) and the asker `reply`; on a failed commit the book takes the
    /// turn back (`undo`) and the asker is refused.
    Prompt {
        conn: ConnId,
        reply: crate::wire::TaskPromptReply,
        go: Box<crate::tasks::TaskAction>,
        undo: Box<crate::tasks::PromptUndo>,
    },
    /// A line for `conn` once the step is written (`task_close`'s reply); on a failed commit
    /// the asker is refused.
    Line {
        conn: ConnId,
        line: Box<crate::wire::HubLine>,
        tag: &'static str,
    },
    /// A lease granted to a claim's connection (lease design §A.2): on the commit of its
    /// `lease_granted` record the claimer is answered `granted`; on a failed commit the
    /// lease is taken back and its waiter, if it was one, parked again in its place.
    Lease(Box<crate::hub::leases::Grant>),
}

/// An ack waiting for the commit that makes it durable (SPEC §12.2).
#[derive(Debug)]
pub(in crate::hub) struct StagedAck {
    pub(in crate::hub) conn: ConnId,
    pub(in crate::hub) env: Queued,
}

/// A final line, or a peer's forward ack, that waits for the store's flush of the commit
/// `batch` (SPEC §12.1).
#[derive(Debug)]
pub(in crate::hub) struct Held {
    pub(in crate::hub) batch: u64,
    pub(in crate::hub) reply: HeldReply,
}

#[derive(Debug)]
pub(in crate::hub) enum HeldReply {
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
