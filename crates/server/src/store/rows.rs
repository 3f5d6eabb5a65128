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

use super::{QueuedRef, RowRef, StoredId, StoredRequest, StoredTask};
use agent_hub_proto::hub::durable::RowRefused;
use agent_hub_proto::tasks::meter::{Budget, Meter};
use agent_hub_proto::wire::approval::{check_allow, AllowRule};
use agent_hub_proto::wire::envelope_text::{split, Parts};
use rusqlite::types::ValueRef;
use rusqlite::Row;
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::fmt;
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
pub(super) const SELECT_TASKS: &str = "SELECT seq, task, delegator, agent, peer, cwd, prompt, timeout_secs, progress_secs, state, created_ms, started_ms, ended_ms, elapsed_ms, stop_reason, reason, pid, permission, allow, session_id, session_caps, turn, restarts, kept_until_ms, meter, budget, placement FROM tasks ORDER BY seq";

/// The words a stored task's `session_caps` may hold (schema 6, issue 38 design §8).
pub const SESSION_CAPS: [&str; 3] = ["resume", "load", "none"];

/// The longest session id kept (issue 38 design §8, `MAX_SESSION_ID_BYTES`).
pub const MAX_SESSION_ID_BYTES: usize = 1024;

/// A task's turns and restarts at most, as a column holds them (design §6 bounds
/// `tasks.max_turns` to 1000; restarts stop at 3).
const MAX_TURN_COLUMN: i64 = 1_000_000;

/// Columns of the open requests' query (schema 5, issue 37), in the order `decode_request`
/// reads them; `rowid` names a row in an error.
pub(super) const SELECT_REQUESTS: &str = "SELECT rowid, request, task, seq, type, tool_kind, opened_ms, expires_ms FROM requests ORDER BY rowid";

/// The words a stored task's `permission` may hold (`wire::approval::Permission`).
pub const PERMISSIONS: [&str; 3] = ["ask", "reject", "allow"];

/// The types a stored request may have (`wire::approval::RequestType`).
pub const REQUEST_TYPES: [&str; 2] = ["permission", "question"];

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

/// What is wrong with one column of a row, or with a queued envelope's text against its row.
/// Names columns and counts, never a value (module doc).
#[derive(Debug)]
pub enum ColumnError {
    /// SQLite could not hand over the column.
    Unreadable {
        column: &'static str,
        error: rusqlite::Error,
    },
    /// A value of the wrong type: `found` and `wanted` as the text says them ("NULL",
    /// "an integer", "text", "a blob").
    WrongType {
        column: &'static str,
        found: &'static str,
        wanted: &'static str,
    },
    OutOfRange {
        column: &'static str,
        value: i64,
        min: i64,
        max: i64,
    },
    /// Text that is not UTF-8: the offset of its first bad byte.
    NotUtf8 {
        column: &'static str,
        offset: usize,
    },
    Empty {
        column: &'static str,
    },
    /// A state outside `known` (`STATES` or `TASK_STATES`), by its length only.
    UnknownState {
        known: &'static [&'static str],
        chars: usize,
    },
    /// A reader outside `wire::Reader`'s list, by its length only.
    UnknownReader {
        chars: usize,
    },
    /// A task id not of the shape the hub issues.
    BadTaskId,
    /// A request id not of the shape the hub issues (`req-` and 16 hex digits).
    BadRequestId,
    /// A word outside `known` (a task's `permission`, a request's `type`), by its length.
    UnknownWord {
        column: &'static str,
        known: &'static [&'static str],
        chars: usize,
    },
    /// `allow` is not a list of rules the verb could have accepted.
    NotAllowRules,
    /// `meter` or `budget` (schema 6) is not the JSON this build writes there.
    NotFigures {
        column: &'static str,
    },
    /// A text longer than any the hub writes (`session_id`).
    LongText {
        column: &'static str,
        bytes: usize,
        max: usize,
    },
    PromptTooLong {
        bytes: usize,
    },
    DigestLength {
        bytes: usize,
    },
    TextTooLong {
        bytes: usize,
    },
    TextNotObject,
    /// The text does not parse: `lacks_fields` when it is JSON without a string id, from or
    /// to (serde's category; its own text can quote a value), and where it stopped.
    TextUnparsed {
        lacks_fields: bool,
        line: usize,
        column: usize,
    },
    /// A field of the envelope's text differs from the row's column.
    TextDiffers {
        field: &'static str,
        column: &'static str,
    },
}

impl fmt::Display for ColumnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ColumnError::Unreadable { column, error } => {
                write!(f, "column {column} cannot be read ({error})")
            }
            ColumnError::WrongType {
                column,
                found,
                wanted,
            } => write!(f, "{column} is {found}, not {wanted}"),
            ColumnError::OutOfRange {
                column,
                value,
                min,
                max,
            } => write!(f, "{column} is {value}, outside {min}..={max}"),
            ColumnError::NotUtf8 { column, offset } => write!(
                f,
                "{column} is not valid UTF-8 (bad byte at offset {offset})"
            ),
            ColumnError::Empty { column } => write!(f, "{column} is empty"),
            ColumnError::UnknownState { known, chars } => write!(
                f,
                "state is not one of {} (it holds {chars} characters)",
                known.join(", ")
            ),
            ColumnError::UnknownReader { chars } => write!(
                f,
                "reader is not one of unknown, {} (it holds {chars} characters)",
                agent_hub_proto::wire::Reader::list()
            ),
            ColumnError::BadTaskId => write!(f, "task is not task- and 32 hex digits"),
            ColumnError::BadRequestId => write!(f, "request is not req- and 16 hex digits"),
            ColumnError::UnknownWord {
                column,
                known,
                chars,
            } => write!(
                f,
                "{column} is not one of {} (it holds {chars} characters)",
                known.join(", ")
            ),
            ColumnError::NotAllowRules => write!(
                f,
                "allow is not a list of at most 8 allow rules (docs/delegation.md \"Approvals\")"
            ),
            ColumnError::NotFigures { column } => write!(
                f,
                "{column} is not the JSON this hub writes there (docs/delegation.md \"Cost and usage\")"
            ),
            ColumnError::LongText { column, bytes, max } => {
                write!(f, "{column} is {bytes} bytes, more than the hub keeps ({max})")
            }
            ColumnError::PromptTooLong { bytes } => write!(
                f,
                "prompt is {bytes} bytes, more than any accepted ({MAX_PROMPT_BYTES})"
            ),
            ColumnError::DigestLength { bytes } => write!(f, "digest is {bytes} bytes, not 32"),
            ColumnError::TextTooLong { bytes } => write!(
                f,
                "text is {bytes} bytes, more than any accepted envelope ({MAX_TEXT_BYTES})"
            ),
            ColumnError::TextNotObject => write!(f, "text is not a JSON object"),
            ColumnError::TextUnparsed {
                lacks_fields,
                line,
                column,
            } => {
                let what = if *lacks_fields {
                    "lacks a string id, from or to"
                } else {
                    "is not valid JSON"
                };
                write!(f, "text {what} (line {line}, column {column})")
            }
            ColumnError::TextDiffers { field, column } => write!(
                f,
                "the envelope text's \"{field}\" differs from the row's {column}"
            ),
        }
    }
}

impl std::error::Error for ColumnError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ColumnError::Unreadable { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// A row read back at startup that this hub cannot have written (`StoreError::Corrupt`).
#[derive(Debug)]
pub enum RowError {
    /// A row whose seq itself is unreadable or out of range: nothing to name it by.
    Seq(ColumnError),
    /// An envelope row, by its seq.
    Envelope { seq: u64, error: ColumnError },
    /// A task row, by its seq.
    Task { seq: u64, error: ColumnError },
    /// An open request's row, by its rowid.
    Request { rowid: i64, error: ColumnError },
    /// A seq that does not grow (`check_order`).
    Repeated { seq: u64 },
    /// Two rows with one sender and id (`check_unique`).
    Duplicate { first: u64, second: u64 },
    /// The sink refused a row (`RowSink::row`).
    Refused(RowRefused),
}

impl fmt::Display for RowError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RowError::Seq(e) => write!(f, "{e}"),
            RowError::Envelope { seq, error } => write!(f, "row seq {seq}: {error}"),
            RowError::Task { seq, error } => write!(f, "task row seq {seq}: {error}"),
            RowError::Request { rowid, error } => {
                write!(f, "request row rowid {rowid}: {error}")
            }
            RowError::Repeated { seq } => write!(f, "seq {seq} appears more than once"),
            RowError::Duplicate { first, second } => write!(
                f,
                "rows seq {first} and seq {second} hold the same sender and id"
            ),
            RowError::Refused(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for RowError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RowError::Seq(e)
            | RowError::Envelope { error: e, .. }
            | RowError::Task { error: e, .. }
            | RowError::Request { error: e, .. } => Some(e),
            RowError::Refused(e) => Some(e),
            _ => None,
        }
    }
}

/// Decodes one task row, checking what the task book relies on: a task id of the shape the
/// hub issues, a known state, numbers in range. Error texts name the column, never a value
/// (the prompt and the cwd are the delegator's).
pub(super) fn decode_task(row: &Row<'_>) -> Result<StoredTask, RowError> {
    let c = Cols { row };
    let seq = c.int(0, "seq", 0, MAX_SEQ).map_err(RowError::Seq)? as u64;
    let at = |error: ColumnError| RowError::Task { seq, error };
    let task = c.nonempty(1, "task").map_err(at)?.to_owned();
    if agent_hub_proto::tasks::TaskId::parse(&task).is_none() {
        return Err(at(ColumnError::BadTaskId));
    }
    let state = c.text(9, "state").map_err(at)?.to_owned();
    if !TASK_STATES.contains(&state.as_str()) {
        return Err(at(ColumnError::UnknownState {
            known: &TASK_STATES,
            chars: state.chars().count(),
        }));
    }
    let prompt = c.text(6, "prompt").map_err(at)?.to_owned();
    if prompt.len() > MAX_PROMPT_BYTES {
        return Err(at(ColumnError::PromptTooLong {
            bytes: prompt.len(),
        }));
    }
    let secs = agent_hub_host::config::tasks::MAX_TASK_TIMEOUT_SECS as i64;
    let opt_int = |i: usize, name: &'static str, max: i64| -> Result<Option<i64>, ColumnError> {
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
        permission: c
            .opt_word(17, "permission", &PERMISSIONS)
            .map_err(at)?
            .map(str::to_owned),
        allow: match c.opt_text(18, "allow").map_err(at)? {
            None => None,
            Some(text) => {
                let rules = serde_json::from_str::<Vec<AllowRule>>(text)
                    .ok()
                    .filter(|r| check_allow(r).is_ok());
                if rules.is_none() {
                    return Err(at(ColumnError::NotAllowRules));
                }
                Some(text.to_owned())
            }
        },
        session_id: match c.opt_text(19, "session_id").map_err(at)? {
            Some(t) if t.len() > MAX_SESSION_ID_BYTES => {
                return Err(at(ColumnError::LongText {
                    column: "session_id",
                    bytes: t.len(),
                    max: MAX_SESSION_ID_BYTES,
                }))
            }
            t => t.map(str::to_owned),
        },
        session_caps: c
            .opt_word(20, "session_caps", &SESSION_CAPS)
            .map_err(at)?
            .map(str::to_owned),
        turn: c.int(21, "turn", 0, MAX_TURN_COLUMN).map_err(at)? as u32,
        restarts: c.int(22, "restarts", 0, MAX_TURN_COLUMN).map_err(at)? as u32,
        kept_until_ms: opt_int(23, "kept_until_ms", MAX_UNIX_MS).map_err(at)?,
        meter: match c.opt_text(24, "meter").map_err(at)? {
            Some(t) if Meter::from_column(t).is_err() => {
                return Err(at(ColumnError::NotFigures { column: "meter" }))
            }
            t => t.map(str::to_owned),
        },
        budget: match c.opt_text(25, "budget").map_err(at)? {
            Some(t) if Budget::from_column(t).is_err() => {
                return Err(at(ColumnError::NotFigures { column: "budget" }))
            }
            t => t.map(str::to_owned),
        },
        placement: c.opt_text(26, "placement").map_err(at)?.map(str::to_owned),
    })
}

/// Decodes one open request's row (schema 5; issue 37 design §4.6), checking what the
/// restart relies on: ids of the shapes the hub issues, a known type, numbers in range.
pub(super) fn decode_request(row: &Row<'_>) -> Result<StoredRequest, RowError> {
    let c = Cols { row };
    // The rowid names the row; SQLite gives every row an integer one.
    let rowid = c
        .int(0, "rowid", i64::MIN, i64::MAX)
        .map_err(RowError::Seq)?;
    let at = |error: ColumnError| RowError::Request { rowid, error };
    let request = c.nonempty(1, "request").map_err(at)?.to_owned();
    if !agent_hub_proto::tasks::approvals::is_request_id(&request) {
        return Err(at(ColumnError::BadRequestId));
    }
    let task = c.nonempty(2, "task").map_err(at)?.to_owned();
    if agent_hub_proto::tasks::TaskId::parse(&task).is_none() {
        return Err(at(ColumnError::BadTaskId));
    }
    Ok(StoredRequest {
        request,
        task,
        seq: c.int(3, "seq", 1, i64::from(u32::MAX)).map_err(at)? as u32,
        kind: c
            .opt_word(4, "type", &REQUEST_TYPES)
            .map_err(at)?
            .ok_or(ColumnError::WrongType {
                column: "type",
                found: "NULL",
                wanted: "text",
            })
            .map_err(at)?
            .to_owned(),
        tool_kind: c.opt_text(5, "tool_kind").map_err(at)?.map(str::to_owned),
        opened_ms: c.int(6, "opened_ms", 0, MAX_UNIX_MS).map_err(at)?,
        expires_ms: c.int(7, "expires_ms", 0, MAX_UNIX_MS).map_err(at)?,
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
    fn get(&self, i: usize, column: &'static str) -> Result<ValueRef<'r>, ColumnError> {
        self.row
            .get_ref(i)
            .map_err(|error| ColumnError::Unreadable { column, error })
    }

    fn int(&self, i: usize, column: &'static str, min: i64, max: i64) -> Result<i64, ColumnError> {
        match self.get(i, column)? {
            ValueRef::Integer(v) if (min..=max).contains(&v) => Ok(v),
            ValueRef::Integer(value) => Err(ColumnError::OutOfRange {
                column,
                value,
                min,
                max,
            }),
            other => Err(ColumnError::WrongType {
                column,
                found: kind(&other),
                wanted: "an integer",
            }),
        }
    }

    fn text(&self, i: usize, column: &'static str) -> Result<&'r str, ColumnError> {
        match self.opt_text(i, column)? {
            Some(s) => Ok(s),
            None => Err(ColumnError::WrongType {
                column,
                found: "NULL",
                wanted: "text",
            }),
        }
    }

    /// Text borrowed from the row (valid until the cursor steps on).
    fn opt_text(&self, i: usize, column: &'static str) -> Result<Option<&'r str>, ColumnError> {
        match self.get(i, column)? {
            ValueRef::Null => Ok(None),
            ValueRef::Text(b) => match std::str::from_utf8(b) {
                Ok(s) => Ok(Some(s)),
                Err(e) => Err(ColumnError::NotUtf8 {
                    column,
                    offset: e.valid_up_to(),
                }),
            },
            other => Err(ColumnError::WrongType {
                column,
                found: kind(&other),
                wanted: "text",
            }),
        }
    }

    /// Text that must be one of `known` when present.
    fn opt_word(
        &self,
        i: usize,
        column: &'static str,
        known: &'static [&'static str],
    ) -> Result<Option<&'r str>, ColumnError> {
        match self.opt_text(i, column)? {
            Some(w) if !known.contains(&w) => Err(ColumnError::UnknownWord {
                column,
                known,
                chars: w.chars().count(),
            }),
            other => Ok(other),
        }
    }

    fn nonempty(&self, i: usize, column: &'static str) -> Result<&'r str, ColumnError> {
        let s = self.text(i, column)?;
        if s.is_empty() {
            return Err(ColumnError::Empty { column });
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
fn check_text(text: &str, id: &str, sender: &str, recipient: &str) -> Result<(), ColumnError> {
    if text.len() > MAX_TEXT_BYTES {
        return Err(ColumnError::TextTooLong { bytes: text.len() });
    }
    if !text.trim_start().starts_with('{') {
        return Err(ColumnError::TextNotObject);
    }
    // The error's category and position only: serde's own text can quote a value.
    let head: Head = serde_json::from_str(text).map_err(|e| ColumnError::TextUnparsed {
        lacks_fields: e.classify() == serde_json::error::Category::Data,
        line: e.line(),
        column: e.column(),
    })?;
    for (field, got, want, column) in [
        ("id", head.id.as_ref(), id, "id"),
        ("from", head.from.as_ref(), sender, "sender"),
        ("to", head.to.as_ref(), recipient, "recipient"),
    ] {
        if got != want {
            return Err(ColumnError::TextDiffers { field, column });
        }
    }
    Ok(())
}

/// Decodes one row: its remembered id, and the queued envelope when `text` is set, every
/// string borrowed from SQLite's buffer for the row (the hub copies what it keeps of the
/// text once, `Queued::text`).
pub(super) fn decode<'r>(row: &'r Row<'_>) -> Result<RowRef<'r>, RowError> {
    let c = Cols { row };
    let seq = c.int(0, "seq", 0, MAX_SEQ).map_err(RowError::Seq)? as u64;
    let at = |error: ColumnError| RowError::Envelope { seq, error };
    let recipient = c.nonempty(1, "recipient").map_err(at)?;
    let id = c.nonempty(2, "id").map_err(at)?;
    let sender = c.nonempty(3, "sender").map_err(at)?;
    let digest = match c.get(8, "digest").map_err(at)? {
        ValueRef::Blob(b) if b.len() == 32 => {
            let mut d = [0u8; 32];
            d.copy_from_slice(b);
            d
        }
        ValueRef::Blob(b) => return Err(at(ColumnError::DigestLength { bytes: b.len() })),
        other => {
            return Err(at(ColumnError::WrongType {
                column: "digest",
                found: kind(&other),
                wanted: "a blob",
            }))
        }
    };
    let state = c.text(10, "state").map_err(at)?;
    let Some(state) = STATES.iter().copied().find(|s| *s == state) else {
        return Err(at(ColumnError::UnknownState {
            known: &STATES,
            chars: state.chars().count(),
        }));
    };
    let reader = match c.opt_text(13, "reader").map_err(at)? {
        None => None,
        Some(r) => Some(agent_hub_proto::wire::Reader::stored(r).ok_or_else(|| {
            at(ColumnError::UnknownReader {
                chars: r.chars().count(),
            })
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
pub(super) fn check_order(previous: Option<u64>, seq: u64) -> Result<(), RowError> {
    match previous {
        Some(p) if seq <= p => Err(RowError::Repeated { seq }),
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
pub(super) fn check_unique(ids: &[StoredId]) -> Result<(), RowError> {
    let keys = RandomState::new();
    let mut hashes: HashMap<u64, usize, BuildHasherDefault<PreHashed>> =
        HashMap::with_capacity_and_hasher(ids.len(), BuildHasherDefault::default());
    for (i, r) in ids.iter().enumerate() {
        let h = keys.hash_one((r.sender.as_str(), r.id.as_str()));
        if let Some(first) = hashes.insert(h, i).and_then(|j| ids.get(j)) {
            if first.sender == r.sender && first.id == r.id {
                return Err(RowError::Duplicate {
                    first: first.seq,
                    second: r.seq,
                });
            }
            return check_unique_exact(ids);
        }
    }
    Ok(())
}

/// `check_unique` comparing the keys themselves.
fn check_unique_exact(ids: &[StoredId]) -> Result<(), RowError> {
    let mut seen: HashMap<(&str, &str), u64> = HashMap::with_capacity(ids.len());
    for r in ids {
        if let Some(first) = seen.insert((r.sender.as_str(), r.id.as_str()), r.seq) {
            return Err(RowError::Duplicate {
                first,
                second: r.seq,
            });
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
        let e = check_text(r#"{"id":7,"body":"SECRET"}"#, "x", "a", "b")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("SECRET"), "{e}");
        let e = check_text(r#"{"id":"x","from":"a","to":"SECRET"}"#, "x", "a", "b")
            .unwrap_err()
            .to_string();
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
        let text = |r: Result<(), RowError>| r.map_err(|e| e.to_string());
        assert_eq!(text(check_unique(&ids)), Ok(()));
        assert_eq!(text(check_unique_exact(&ids)), Ok(()));
        ids.push(id_row(20_002, "b", "id7"));
        let want = Err("rows seq 22 and seq 20002 hold the same sender and id".to_owned());
        assert_eq!(text(check_unique(&ids)), want);
        assert_eq!(text(check_unique_exact(&ids)), want);
    }
}
