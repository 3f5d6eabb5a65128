//! Reading the queue store's rows back at startup, trusting nothing: every column is checked
//! for its type, its range and its agreement with the rest of the row before the hub builds
//! queues and the ledger from it (docs/operations.md, "Queue store schema and migrations").
//!
//! A file edited by hand, damaged on disk or written by a buggy build must stop the hub with
//! a clear error naming the row and what is wrong with it, never panic it, overflow its
//! arithmetic (`seq + 1`, attempt counts) or restore an envelope whose text says something
//! else than its row. Error texts name columns and rows, never a value from an envelope (a
//! body or an id must not reach the service log).
//!
//! Owns the column list of the load query and the checks. Refuses IO beyond reading a row.

use super::{QueuedRef, RowRef, StoredId, StoredTask};
use agent_hub_proto::wire::envelope_text::{split, Parts};
use rusqlite::types::ValueRef;
use rusqlite::Row;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};

/// Columns in the order `decode` reads them.
pub(super) const SELECT_ALL: &str = "SELECT seq, recipient, id, sender, kind, correlation_id, text, attempts, digest, accepted_ms, state, detail, state_ms, reader FROM envelopes ORDER BY seq";

/// The first and last seq of `SELECT_ALL`'s rows: a bound on their number, to size the
/// sink's tables (each query one descent of the table's b-tree).
pub(super) const FIRST_SEQ: &str = "SELECT min(seq) FROM envelopes";
pub(super) const LAST_SEQ: &str = "SELECT max(seq) FROM envelopes";

/// The largest acceptance number a row may carry. The hub numbers new envelopes after the
/// largest it loads and stores them as SQLite integers (i64), so a seq near i64::MAX would
/// leave no room; 2^62 leaves 2^62 more acceptances (146,000 years at a million a second).
pub const MAX_SEQ: i64 = 1 << 62;

/// Envelope text longer than this cannot have been accepted: `limits.max_line_bytes` is at
/// most 64 MiB (`config::bounds::MAX_LINE_BYTES`) and the canonical text is about the
/// line's size. Twice that leaves room for a stamped `from` and `correlationId`.
pub const MAX_TEXT_BYTES: usize = 128 * 1024 * 1024;

/// Wall-clock times (milliseconds since 1970) must fall in 1970..=9999: what RFC 3339 can
/// show in `status`, and far from i64 overflow when the retention window is added.
pub const MAX_UNIX_MS: i64 = 253_402_300_799_999;

/// The states a remembered id can be in (`hub::ledger::State`; a test keeps the two lists
/// equal).
pub const STATES: [&str; 6] = [
    "queued",
    "delivered",
    "acked",
    "forwarded",
    "bounced",
    "lost",
];

/// Columns of the tasks query, in the order `decode_task` reads them (acceptance order).
pub(super) const SELECT_TASKS: &str = "SELECT seq, task, delegator, agent, peer, cwd, prompt, timeout_secs, progress_secs, state, created_ms, started_ms, ended_ms, elapsed_ms, stop_reason, reason, pid FROM tasks ORDER BY seq";

/// The states a stored task can be in (`tasks::TaskState`'s names; a test keeps the two
/// lists equal).
pub const TASK_STATES: [&str; 9] = [
    "queued",
    "running",
    "cancelling",
    "completed",
    "failed",
    "cancelled",
    "timed_out",
    "refused",
    "hub_restarted",
];

/// Longest prompt a row may hold: `tasks.prompt_max_bytes` is bounded by the ACP session's
/// `max_prompt_bytes` upper bound, far below this.
pub const MAX_PROMPT_BYTES: usize = 64 * 1024 * 1024;

/// Decodes one task row, checking what the task book relies on: a task id of the shape the
/// hub issues, a known state, numbers in range. Error texts name the column, never a value
/// (the prompt and the cwd are the delegator's).
pub(super) fn decode_task(row: &Row<'_>) -> Result<StoredTask, String> {
    let c = Cols { row };
    let seq = c.int(0, "seq", 0, MAX_SEQ)? as u64;
    let at = |e: String| format!("task row seq {seq}: {e}");
    let task = c.nonempty(1, "task").map_err(at)?.to_owned();
    if agent_hub_proto::tasks::TaskId::parse(&task).is_none() {
        return Err(at("task is not task- and 32 hex digits".into()));
    }
    let state = c.text(9, "state").map_err(at)?.to_owned();
    if !TASK_STATES.contains(&state.as_str()) {
        return Err(at(format!(
            "state is not one of {} (it holds {} characters)",
            TASK_STATES.join(", "),
            state.chars().count()
        )));
    }
    let prompt = c.text(6, "prompt").map_err(at)?.to_owned();
    if prompt.len() > MAX_PROMPT_BYTES {
        return Err(at(format!(
            "prompt is {} bytes, more than any accepted ({MAX_PROMPT_BYTES})",
            prompt.len()
        )));
    }
    let secs = agent_hub_host::config::tasks::MAX_TASK_TIMEOUT_SECS as i64;
    let opt_int = |i: usize, name: &str, max: i64| -> Result<Option<i64>, String> {
        match c.get(i, name)? {
            ValueRef::Null => Ok(None),
            _ => c.int(i, name, 0, max).map(Some),
        }
    };
    Ok(StoredTask {
        seq,
        task,
        delegator: c.nonempty(2, "delegator").map_err(at)?.to_owned(),
        agent: c.nonempty(3, "agent").map_err(at)?.to_owned(),
        peer: c.opt_text(4, "peer").map_err(at)?.map(str::to_owned),
        cwd: c.nonempty(5, "cwd").map_err(at)?.to_owned(),
        prompt,
        timeout_secs: c.int(7, "timeout_secs", 0, secs).map_err(at)? as u64,
        progress_secs: c.int(8, "progress_secs", 0, secs).map_err(at)? as u64,
        state,
        created_ms: c.int(10, "created_ms", 0, MAX_UNIX_MS).map_err(at)?,
        started_ms: opt_int(11, "started_ms", MAX_UNIX_MS).map_err(at)?,
        ended_ms: opt_int(12, "ended_ms", MAX_UNIX_MS).map_err(at)?,
        elapsed_ms: opt_int(13, "elapsed_ms", MAX_UNIX_MS)
            .map_err(at)?
            .map(|v| v as u64),
        stop_reason: c
            .opt_text(14, "stop_reason")
            .map_err(at)?
            .map(str::to_owned),
        reason: c.opt_text(15, "reason").map_err(at)?.map(str::to_owned),
        pid: opt_int(16, "pid", i64::from(i32::MAX))
            .map_err(at)?
            .map(|v| v as u32),
    })
}

fn kind(v: &ValueRef<'_>) -> &'static str {
    match v {
        ValueRef::Null => "NULL",
        ValueRef::Integer(_) => "an integer",
        ValueRef::Real(_) => "a real number",
        ValueRef::Text(_) => "text",
        ValueRef::Blob(_) => "a blob",
    }
}

/// One row's columns, each decoded with its column's name for the error.
struct Cols<'r, 's> {
    row: &'r Row<'s>,
}

impl<'r> Cols<'r, '_> {
    fn get(&self, i: usize, name: &str) -> Result<ValueRef<'r>, String> {
        self.row
            .get_ref(i)
            .map_err(|e| format!("column {name} cannot be read ({e})"))
    }

    fn int(&self, i: usize, name: &str, min: i64, max: i64) -> Result<i64, String> {
        match self.get(i, name)? {
            ValueRef::Integer(v) if (min..=max).contains(&v) => Ok(v),
            ValueRef::Integer(v) => Err(format!("{name} is {v}, outside {min}..={max}")),
            other => Err(format!("{name} is {}, not an integer", kind(&other))),
        }
    }

    fn text(&self, i: usize, name: &str) -> Result<&'r str, String> {
        match self.opt_text(i, name)? {
            Some(s) => Ok(s),
            None => Err(format!("{name} is NULL, not text")),
        }
    }

    /// Text borrowed from the row (valid until the cursor steps on).
    fn opt_text(&self, i: usize, name: &str) -> Result<Option<&'r str>, String> {
        match self.get(i, name)? {
            ValueRef::Null => Ok(None),
            ValueRef::Text(b) => match std::str::from_utf8(b) {
                Ok(s) => Ok(Some(s)),
                Err(e) => Err(format!(
                    "{name} is not valid UTF-8 (bad byte at offset {})",
                    e.valid_up_to()
                )),
            },
            other => Err(format!("{name} is {}, not text", kind(&other))),
        }
    }

    fn nonempty(&self, i: usize, name: &str) -> Result<&'r str, String> {
        let s = self.text(i, name)?;
        if s.is_empty() {
            return Err(format!("{name} is empty"));
        }
        Ok(s)
    }
}

/// The three fields of an envelope's text that must agree with its row. Unknown fields (the
/// body among them) are skipped unparsed.
/// Borrowed from the text where it has no escapes: no allocation per row at startup.
#[derive(serde::Deserialize)]
struct Head<'a> {
    #[serde(borrow)]
    id: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    from: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    to: std::borrow::Cow<'a, str>,
}

/// Checks the canonical text of a queued envelope against its row.
fn check_text(text: &str, id: &str, sender: &str, recipient: &str) -> Result<(), String> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(format!(
            "text is {} bytes, more than any accepted envelope ({MAX_TEXT_BYTES})",
            text.len()
        ));
    }
    if !text.trim_start().starts_with('{') {
        return Err("text is not a JSON object".into());
    }
    // The error's category and position only: serde's own text can quote a value.
    let head: Head = serde_json::from_str(text).map_err(|e| {
        let what = match e.classify() {
            serde_json::error::Category::Data => "lacks a string id, from or to",
            _ => "is not valid JSON",
        };
        format!("text {what} (line {}, column {})", e.line(), e.column())
    })?;
    for (field, got, want, column) in [
        ("id", head.id.as_ref(), id, "id"),
        ("from", head.from.as_ref(), sender, "sender"),
        ("to", head.to.as_ref(), recipient, "recipient"),
    ] {
        if got != want {
            return Err(format!(
                "the envelope text's \"{field}\" differs from the row's {column}"
            ));
        }
    }
    Ok(())
}

/// Decodes one row: its remembered id, and the queued envelope when `text` is set, every
/// string borrowed from SQLite's buffer for the row (the hub copies what it keeps of the
/// text once, `Queued::text`).
pub(super) fn decode<'r>(row: &'r Row<'_>) -> Result<RowRef<'r>, String> {
    let c = Cols { row };
    let seq = c.int(0, "seq", 0, MAX_SEQ)? as u64;
    let at = |e: String| format!("row seq {seq}: {e}");
    let recipient = c.nonempty(1, "recipient").map_err(at)?;
    let id = c.nonempty(2, "id").map_err(at)?;
    let sender = c.nonempty(3, "sender").map_err(at)?;
    let digest = match c.get(8, "digest").map_err(at)? {
        ValueRef::Blob(b) if b.len() == 32 => {
            let mut d = [0u8; 32];
            d.copy_from_slice(b);
            d
        }
        ValueRef::Blob(b) => return Err(at(format!("digest is {} bytes, not 32", b.len()))),
        other => return Err(at(format!("digest is {}, not a blob", kind(&other)))),
    };
    let state = c.text(10, "state").map_err(at)?;
    let Some(state) = STATES.iter().copied().find(|s| *s == state) else {
        return Err(at(format!(
            "state is not one of {} (it holds {} characters)",
            STATES.join(", "),
            state.chars().count()
        )));
    };
    let reader = match c.opt_text(13, "reader").map_err(at)? {
        None => None,
        Some(r) => Some(agent_hub_proto::wire::Reader::stored(r).ok_or_else(|| {
            at(format!(
                "reader is not one of unknown, {} (it holds {} characters)",
                agent_hub_proto::wire::Reader::list(),
                r.chars().count()
            ))
        })?),
    };
    let mut stored = RowRef {
        seq,
        digest,
        reader,
        accepted_ms: c.int(9, "accepted_ms", 0, MAX_UNIX_MS).map_err(at)?,
        state,
        detail: c.opt_text(11, "detail").map_err(at)?,
        state_ms: c.int(12, "state_ms", 0, MAX_UNIX_MS).map_err(at)?,
        sender,
        id,
        to: recipient,
        queued: None,
    };
    let Some(text) = c.opt_text(6, "text").map_err(at)? else {
        return Ok(stored);
    };
    let kind = c.text(4, "kind").map_err(at)?;
    let correlation_id = c.opt_text(5, "correlation_id").map_err(at)?;
    // The hub writes every text in its canonical form (`Envelope::to_json`): one compare of
    // the fields in their places and a parse of the body check it, and tell the hub where
    // its `ts` and body are. Any other text gets the general check and is kept whole.
    let parts = Parts {
        id: stored.id,
        from: stored.sender,
        to: stored.to,
        kind,
        correlation_id,
    };
    // The length first: an oversized text is refused unread (`check_text`).
    let cut = (text.len() <= MAX_TEXT_BYTES)
        .then(|| split(text, &parts))
        .flatten();
    if cut.is_none() {
        check_text(text, stored.id, stored.sender, stored.to).map_err(at)?;
    }
    stored.queued = Some(QueuedRef {
        kind,
        correlation_id,
        text,
        split: cut,
        attempts: c.int(7, "attempts", 0, i64::from(u32::MAX)).map_err(at)? as u32,
    });
    Ok(stored)
}

/// Rows come `ORDER BY seq`: a seq that does not grow is one seen twice (the schema's
/// primary key forbids it, so only a rebuilt table can hold it).
pub(super) fn check_order(previous: Option<u64>, seq: u64) -> Result<(), String> {
    match previous {
        Some(p) if seq <= p => Err(format!("seq {seq} appears more than once")),
        _ => Ok(()),
    }
}

/// A hasher for keys that already are keyed SipHash outputs (`check_unique`): passes the
/// 64 bits through instead of hashing them again.
#[derive(Default)]
struct PreHashed(u64);

impl Hasher for PreHashed {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        // Only `write_u64` is used; fold anything else in rather than drop it.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// No two rows may remember the same id from the same sender: the ledger keys by them, so one
/// would silently shadow the other.
///
/// A restart reads a million rows (docs/performance.md "How cost grows with work"), so each
/// row costs one randomly keyed SipHash of its sender and id into a table of 64-bit integers
/// (a client chooses ids, so the hash must stay keyed); two rows with one hash are then
/// compared. Only when two different keys share a hash (about once in 10^7 restarts of a
/// million rows) does the exact check of every key run.
pub(super) fn check_unique(ids: &[StoredId]) -> Result<(), String> {
    let keys = RandomState::new();
    let mut hashes: HashMap<u64, usize, BuildHasherDefault<PreHashed>> =
        HashMap::with_capacity_and_hasher(ids.len(), BuildHasherDefault::default());
    for (i, r) in ids.iter().enumerate() {
        let h = keys.hash_one((r.sender.as_str(), r.id.as_str()));
        if let Some(first) = hashes.insert(h, i).and_then(|j| ids.get(j)) {
            if first.sender == r.sender && first.id == r.id {
                return Err(duplicate(first.seq, r.seq));
            }
            return check_unique_exact(ids);
        }
    }
    Ok(())
}

fn duplicate(first: u64, second: u64) -> String {
    format!("rows seq {first} and seq {second} hold the same sender and id")
}

/// `check_unique` comparing the keys themselves.
fn check_unique_exact(ids: &[StoredId]) -> Result<(), String> {
    let mut seen: HashMap<(&str, &str), u64> = HashMap::with_capacity(ids.len());
    for r in ids {
        if let Some(first) = seen.insert((r.sender.as_str(), r.id.as_str()), r.seq) {
            return Err(duplicate(first, r.seq));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_hub_proto::hub::ledger::State;

    #[test]
    fn the_state_list_is_the_ledgers() {
        for s in STATES {
            assert_eq!(State::parse(s).map(State::as_str), Some(s));
        }
        for s in [
            State::Queued,
            State::Delivered,
            State::Acked,
            State::Forwarded,
            State::Bounced,
            State::Lost,
        ] {
            assert!(STATES.contains(&s.as_str()));
        }
    }

    #[test]
    fn text_errors_never_quote_the_envelope() {
        let e = check_text(r#"{"id":7,"body":"SECRET"}"#, "x", "a", "b").unwrap_err();
        assert!(!e.contains("SECRET"), "{e}");
        let e = check_text(r#"{"id":"x","from":"a","to":"SECRET"}"#, "x", "a", "b").unwrap_err();
        assert!(!e.contains("SECRET"), "{e}");
        assert!(check_text(r#"{"id":"x","from":"a","to":"b","body":{}}"#, "x", "a", "b").is_ok());
    }

    fn id_row(seq: u64, sender: &str, id: &str) -> StoredId {
        StoredId {
            seq,
            sender: sender.into(),
            id: id.into(),
            to: "b".into(),
            digest: [0; 32],
            accepted_ms: 0,
            state: "acked".into(),
            detail: None,
            state_ms: 0,
            reader: None,
        }
    }

    /// The hashed check and the exact one agree: distinct keys pass (the same id from
    /// another sender, a sender and id that concatenate alike), a repeated key is named by
    /// both its rows.
    #[test]
    fn check_unique_finds_a_repeated_sender_and_id() {
        let mut ids: Vec<StoredId> = (0..10_000)
            .map(|i| {
                id_row(
                    i,
                    ["a", "b", "c"][(i % 3) as usize],
                    &format!("id{}", i / 3),
                )
            })
            .collect();
        ids.push(id_row(20_000, "ab", "c"));
        ids.push(id_row(20_001, "a", "bc"));
        assert_eq!(check_unique(&ids), Ok(()));
        assert_eq!(check_unique_exact(&ids), Ok(()));
        ids.push(id_row(20_002, "b", "id7"));
        let want = Err("rows seq 22 and seq 20002 hold the same sender and id".to_owned());
        assert_eq!(check_unique(&ids), want);
        assert_eq!(check_unique_exact(&ids), want);
    }
}
