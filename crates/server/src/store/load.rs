//! Startup's read of the SQLite store (`Store::load_rows`) on two threads: one steps SQLite's
//! cursor and checks each row (`rows::decode`: the columns, the envelope's text against its
//! row), the caller's thread hands the checked rows to the sink (the hub's queues and
//! ledger). A restart of a million rows spends about half its CPU on each side
//! (docs/performance.md "Restart"), so on two cores it takes about the longer
//! half instead of the sum.
//!
//! The rows cross in batches, in acceptance order, through a bounded channel (at most
//! `BATCHES_IN_FLIGHT` batches held at once, so a slow sink bounds the memory ahead of it).
//! A batch copies a row's strings (names, id, kind, detail, the text) into one buffer: a few
//! allocations per batch, not per row. What the queue keeps of the text (its `ts` and body,
//! `Queued::text`) is allocated by the sink, which evens the two threads' shares (the
//! reader's was the larger). The first error, from either side, ends the load: a failed
//! check or a failed step is sent as the last message; a sink that refuses a row drops the
//! receiver, which stops the reader at its next send. The reader borrows the store's one
//! connection for the scope of the load (scoped thread): no second connection, and nothing
//! else uses it meanwhile.
//!
//! Owns only that pipeline. Refuses: deciding what a row means (`rows`, the sink).

use super::{rows, QueuedRef, RowRef, RowSink, StoreError};
use agent_hub_proto::hub::durable::RowRefused;
use rusqlite::Connection;
use std::ops::Range;
use std::sync::mpsc::{sync_channel, SyncSender};

/// Rows per batch: large enough that the channel's cost per row is nothing, small enough
/// that the sink starts at once and a batch stays in cache.
const BATCH_ROWS: usize = 1024;
/// Batches the reader may run ahead of the sink.
const BATCHES_IN_FLIGHT: usize = 8;
/// Fewer bytes than any row takes in the file (its digest alone is 32): bounds the rows a
/// file of a given size can hold, for the sink's hint.
const MIN_ROW_BYTES: i64 = 40;

/// A checked row with its short strings as ranges of its batch's buffer.
struct Packed {
    seq: u64,
    sender: Range<usize>,
    id: Range<usize>,
    to: Range<usize>,
    digest: [u8; 32],
    accepted_ms: i64,
    state: Range<usize>,
    detail: Option<Range<usize>>,
    state_ms: i64,
    reader: Option<agent_hub_proto::wire::Reader>,
    queued: Option<PackedQueued>,
}

struct PackedQueued {
    kind: Range<usize>,
    correlation_id: Option<Range<usize>>,
    text: Range<usize>,
    split: Option<agent_hub_proto::wire::envelope_text::Split>,
    attempts: u32,
}

#[derive(Default)]
struct Batch {
    strs: String,
    rows: Vec<Packed>,
}

impl Batch {
    fn put(&mut self, s: &str) -> Range<usize> {
        let start = self.strs.len();
        self.strs.push_str(s);
        start..self.strs.len()
    }

    fn pack(&mut self, r: RowRef<'_>) {
        let packed = Packed {
            seq: r.seq,
            sender: self.put(r.sender),
            id: self.put(r.id),
            to: self.put(r.to),
            digest: r.digest,
            accepted_ms: r.accepted_ms,
            state: self.put(r.state),
            detail: r.detail.map(|d| self.put(d)),
            state_ms: r.state_ms,
            reader: r.reader,
            queued: r.queued.map(|q| PackedQueued {
                kind: self.put(q.kind),
                correlation_id: q.correlation_id.map(|c| self.put(c)),
                text: self.put(q.text),
                split: q.split,
                attempts: q.attempts,
            }),
        };
        self.rows.push(packed);
    }

    /// Every row of the batch into `sink`, in order; the first refusal ends it.
    fn feed(self, sink: &mut dyn RowSink) -> Result<(), RowRefused> {
        let s = self.strs.as_str();
        for p in self.rows {
            let text = |r: &Range<usize>| s.get(r.clone()).unwrap_or_default();
            sink.row(RowRef {
                seq: p.seq,
                sender: text(&p.sender),
                id: text(&p.id),
                to: text(&p.to),
                digest: p.digest,
                accepted_ms: p.accepted_ms,
                state: text(&p.state),
                detail: p.detail.as_ref().map(text),
                state_ms: p.state_ms,
                reader: p.reader,
                queued: p.queued.map(|q| QueuedRef {
                    kind: text(&q.kind),
                    correlation_id: q.correlation_id.as_ref().map(text),
                    text: text(&q.text),
                    split: q.split,
                    attempts: q.attempts,
                }),
            })?;
        }
        Ok(())
    }
}

/// Reads every envelope row of `conn` into `sink` (module doc).
pub(super) fn load_rows(conn: &mut Connection, sink: &mut dyn RowSink) -> Result<(), StoreError> {
    // The sink sizes its tables once instead of growing (and rehashing) them row by row.
    // Seqs are unique, so the span of the first and last is a bound on the rows, found in
    // two b-tree descents; a count(*) would read every page before the first row (0.2 s
    // of a million rows' restart) while the sink waits.
    let bound = |sql: &str| -> Result<Option<i64>, StoreError> {
        conn.query_row(sql, [], |r| r.get(0))
            .map_err(super::open_err)
    };
    // A store that forgot most of a long run's rows has a span far above its rows, and a
    // damaged one may hold any seq: the pages in use bound the rows too (each row holds
    // at least its 32-byte digest and a few bytes more), so the hint stays near the truth.
    if let (Some(first), Some(last)) = (bound(rows::FIRST_SEQ)?, bound(rows::LAST_SEQ)?) {
        let span = last.saturating_sub(first).saturating_add(1);
        let pages = bound("PRAGMA page_count")?.unwrap_or(0);
        let free = bound("PRAGMA freelist_count")?.unwrap_or(0);
        let size = bound("PRAGMA page_size")?.unwrap_or(0);
        let in_use = pages.saturating_sub(free).saturating_mul(size);
        let most = span.min(in_use / MIN_ROW_BYTES + 1);
        sink.expect(usize::try_from(most).unwrap_or(0));
    }
    std::thread::scope(|scope| {
        let (tx, rx) = sync_channel(BATCHES_IN_FLIGHT);
        let reader = std::thread::Builder::new()
            .name("store-load".into())
            .spawn_scoped(scope, move || read(conn, &tx))
            .map_err(|e| StoreError::Open(format!("cannot start the store's reader: {e}")))?;
        let mut result = Ok(());
        for message in rx.iter() {
            match message {
                Ok(batch) => {
                    if let Err(e) = Batch::feed(batch, sink) {
                        result = Err(StoreError::Corrupt(rows::RowError::Refused(e)));
                        break;
                    }
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        // A refused row: the reader's next send fails and it returns.
        drop(rx);
        match reader.join() {
            Ok(()) => result,
            Err(_) => Err(StoreError::Open("the store's reader panicked".into())),
        }
    })
}

/// The reader's side: steps the cursor, checks and packs each row, sends full batches; the
/// first error is its last message. Stops early when the receiver is gone.
fn read(conn: &mut Connection, tx: &SyncSender<Result<Batch, StoreError>>) {
    let result = (|| -> Result<(), StoreError> {
        let mut st = conn.prepare(rows::SELECT_ALL).map_err(super::open_err)?;
        let mut cursor = st.query([]).map_err(super::open_err)?;
        let mut previous = None;
        let mut batch = Batch::default();
        while let Some(r) = cursor.next().map_err(super::open_err)? {
            let row = rows::decode(r).map_err(StoreError::Corrupt)?;
            rows::check_order(previous, row.seq).map_err(StoreError::Corrupt)?;
            previous = Some(row.seq);
            batch.pack(row);
            if batch.rows.len() == BATCH_ROWS {
                let strs = String::with_capacity(batch.strs.capacity());
                let full = std::mem::replace(
                    &mut batch,
                    Batch {
                        strs,
                        rows: Vec::with_capacity(BATCH_ROWS),
                    },
                );
                if tx.send(Ok(full)).is_err() {
                    return Ok(());
                }
            }
        }
        if !batch.rows.is_empty() {
            let _ = tx.send(Ok(batch));
        }
        Ok(())
    })();
    if let Err(e) = result {
        let _ = tx.send(Err(e));
    }
}
