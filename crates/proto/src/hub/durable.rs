//! What the core asks the store to keep (SPEC §12), and the rows it reads back at startup:
//! the core's vocabulary for durability, as plain data. The core emits `StoreOp`s in the
//! order it decided; `store` applies them in one transaction per event-loop iteration and
//! streams rows back into a `RowSink` (the hub's restore). Defined here, beside the core that
//! decides them, so the core imports nothing from the store's IO (issue 30, PLAN.md §14);
//! `store` re-exports them under its own name.

use crate::tasks::TaskStoreOp;
use std::sync::Arc;

/// One change to durable state. Applied in order inside one transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreOp {
    /// An accepted envelope joins its queue, and its id is remembered (idempotent send,
    /// status) in state `queued`. `seq` is its acceptance order and names it in later
    /// operations; `digest` covers to, kind, correlationId and body.
    Insert {
        seq: u64,
        agent: String,
        id: String,
        sender: String,
        kind: String,
        correlation_id: Option<String>,
        text: Arc<str>,
        digest: [u8; 32],
        accepted_ms: i64,
    },
    /// A delivery was committed (first byte, or ack in ack mode): the envelope leaves its
    /// queue for good; its id stays remembered until `Forget`.
    Remove { seq: u64 },
    /// How many deliveries of this envelope were attempted and returned.
    Attempts { seq: u64, attempts: u32 },
    /// A remembered envelope's status changed. `reader`: the kind of reader it was handed
    /// to (SPEC §12.4 "Readers"), kept with `delivered`, `acked` and a loss at its reader.
    State {
        seq: u64,
        sender: String,
        id: String,
        state: String,
        detail: Option<String>,
        reader: Option<crate::wire::Reader>,
        at_ms: i64,
    },
    /// Forget a remembered id (settled, past the retention window).
    Forget {
        seq: u64,
        sender: String,
        id: String,
    },
    /// A change to the tasks table (docs/delegation.md "Durability"), as the task book
    /// asked for it; every one of a task step travels in the same batch as its envelope.
    Task(TaskStoreOp),
}

/// An envelope as loaded at startup, in acceptance order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEnvelope {
    pub seq: u64,
    pub agent: String,
    pub id: String,
    pub sender: String,
    pub kind: String,
    pub correlation_id: Option<String>,
    /// The whole text as its row holds it (the hub keeps its `ts` and body, `Queued::text`).
    pub text: Arc<str>,
    pub attempts: u32,
}

impl StoredEnvelope {
    /// Where its text keeps its `ts` and body, when the text is the canonical text of its
    /// fields (`wire::envelope_text::split`), as `QueuedRef::split` says for a streamed row.
    pub fn split(&self) -> Option<crate::wire::envelope_text::Split> {
        crate::wire::envelope_text::split(
            &self.text,
            &crate::wire::envelope_text::Parts {
                id: &self.id,
                from: &self.sender,
                to: &self.agent,
                kind: &self.kind,
                correlation_id: self.correlation_id.as_deref(),
            },
        )
    }
}

/// A remembered id as loaded at startup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredId {
    /// The envelope's acceptance order (unique; restores `Record::seq`).
    pub seq: u64,
    pub sender: String,
    pub id: String,
    pub to: String,
    pub digest: [u8; 32],
    pub accepted_ms: i64,
    pub state: String,
    pub detail: Option<String>,
    pub state_ms: i64,
    /// The reader kind with the state (schema 4; NULL in rows written before).
    pub reader: Option<crate::wire::Reader>,
}

/// Everything the store held at startup.
#[derive(Debug, Default)]
pub struct Loaded {
    pub envelopes: Vec<StoredEnvelope>,
    pub ids: Vec<StoredId>,
}

/// One row as the store reads it at startup (`Store::load_rows`), its strings borrowed from
/// the store's own buffer for the row: a restart of a million rows makes no `String` per
/// column (docs/performance.md "Restart"). Checked as `StoredId` and
/// `StoredEnvelope` are (`rows`), except that no two rows share a sender and id, which is the
/// sink's to refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowRef<'a> {
    /// The envelope's acceptance order (unique; rows come in increasing order).
    pub seq: u64,
    pub sender: &'a str,
    pub id: &'a str,
    pub to: &'a str,
    pub digest: [u8; 32],
    pub accepted_ms: i64,
    /// One of `rows::STATES`.
    pub state: &'a str,
    pub detail: Option<&'a str>,
    pub state_ms: i64,
    pub reader: Option<crate::wire::Reader>,
    /// The queued envelope, when the row still holds its text.
    pub queued: Option<QueuedRef<'a>>,
}

/// The queue entry of a `RowRef`: what a queued row adds to its remembered id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedRef<'a> {
    pub kind: &'a str,
    pub correlation_id: Option<&'a str>,
    /// Checked against the row (`rows`); the sink copies it once into the form it keeps
    /// (the hub: the tail of `Queued::text`), on its own thread (`load`).
    pub text: &'a str,
    /// Where `text` keeps its `ts` and body, when it is the canonical text of the row's
    /// fields (`wire::envelope_text::split`): the hub then keeps only those.
    pub split: Option<crate::wire::envelope_text::Split>,
    pub attempts: u32,
}

/// Why a sink refused a row; the load stops there and the store reports it as corrupt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowRefused {
    /// Two rows hold the same sender and id: the seq of the first and of this one.
    SameSenderAndId { first: u64, seq: u64 },
}

impl std::fmt::Display for RowRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RowRefused::SameSenderAndId { first, seq } => {
                write!(
                    f,
                    "rows seq {first} and seq {seq} hold the same sender and id"
                )
            }
        }
    }
}

impl std::error::Error for RowRefused {}

/// Why the IO layer could not keep a batch: write it to the store and the audit log, or
/// flush it to disk. The text is the IO layer's own (the store's and the OS's words), which the
/// core puts in the refusals it sends and in the service log; it decides nothing by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreFailure {
    reason: String,
}

impl StoreFailure {
    pub fn new(reason: impl Into<String>) -> StoreFailure {
        StoreFailure {
            reason: reason.into(),
        }
    }
}

impl std::fmt::Display for StoreFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for StoreFailure {}

/// Where `Store::load_rows` puts each row. An error stops the load and becomes the store's
/// `StoreError::Corrupt`: a sink refuses a row it cannot take (a repeated sender and id).
pub trait RowSink {
    /// At most this many rows follow (a hint to size tables once: fewer may follow, far
    /// fewer when the store forgot most of a long run's rows, so a sink caps what it
    /// reserves by what it could hold).
    fn expect(&mut self, _rows: usize) {}
    fn row(&mut self, row: RowRef<'_>) -> Result<(), RowRefused>;
}

/// The owned lists, for tests and tools (`Store::load`): what `load_rows` gave, copied.
impl RowSink for Loaded {
    fn expect(&mut self, rows: usize) {
        self.ids.reserve(rows);
    }
    fn row(&mut self, r: RowRef<'_>) -> Result<(), RowRefused> {
        if let Some(q) = r.queued {
            self.envelopes.push(StoredEnvelope {
                seq: r.seq,
                agent: r.to.to_owned(),
                id: r.id.to_owned(),
                sender: r.sender.to_owned(),
                kind: q.kind.to_owned(),
                correlation_id: q.correlation_id.map(str::to_owned),
                text: Arc::from(q.text),
                attempts: q.attempts,
            });
        }
        self.ids.push(StoredId {
            seq: r.seq,
            sender: r.sender.to_owned(),
            id: r.id.to_owned(),
            to: r.to.to_owned(),
            digest: r.digest,
            accepted_ms: r.accepted_ms,
            state: r.state.to_owned(),
            detail: r.detail.map(str::to_owned),
            state_ms: r.state_ms,
            reader: r.reader,
        });
        Ok(())
    }
}
