//! Opening the record files at startup (SPEC §8; part of `records`): a record file created or
//! tightened to mode 600, a torn last line from a crash cut back, and where the audit log's
//! hash chain stands (its last record, the `.head` file beside it, what a lagging or foreign
//! head means), with the service-log lines that say so. Refuses: writing records
//! (`Records`) and the chain's rules (`audit_chain`).

use super::super::audit_chain::{self, Hash};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Opens a record file for appending, creating it with mode 600 and tightening an existing
/// regular file to 600. Special files (a character device in fault tests) are left alone.
pub fn open_record_file(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    let meta = file.metadata()?;
    if meta.is_file() && meta.permissions().mode() & 0o077 != 0 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(file)
}

/// Cuts a record file back to the end of its last complete line and returns the bytes cut. A
/// crash (SIGKILL, power loss) in the middle of an append leaves a partial last line; the
/// next run's first record would be glued to it and both would be unreadable. `file` is the
/// append handle opened on `path`; special files are left alone.
pub fn cut_torn_tail(path: &Path, file: &File) -> io::Result<u64> {
    let meta = file.metadata()?;
    let len = meta.len();
    if !meta.is_file() || len == 0 {
        return Ok(0);
    }
    let reader = File::open(path)?;
    let mut buf = vec![0u8; 64 * 1024];
    let mut end = len;
    while end > 0 {
        let start = end.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(end - start) as usize];
        reader.read_exact_at(chunk, start)?;
        if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
            let keep = start + i as u64 + 1;
            if keep < len {
                file.set_len(keep)?;
            }
            return Ok(len - keep);
        }
        end = start;
    }
    file.set_len(0)?;
    Ok(len)
}

/// Reads the last complete line of a record file (its newline removed), or None when the
/// file is empty. The file ends in a newline (`cut_torn_tail` ran first).
pub fn last_line(path: &Path) -> io::Result<Option<Vec<u8>>> {
    let reader = File::open(path)?;
    let len = reader.metadata()?.len();
    if len == 0 {
        return Ok(None);
    }
    // The byte before `end` is the last line's newline; scan back for the one before it.
    let end = len - 1;
    let mut start = end;
    let mut buf = vec![0u8; 64 * 1024];
    while start > 0 {
        let from = start.saturating_sub(buf.len() as u64);
        let chunk = &mut buf[..(start - from) as usize];
        reader.read_exact_at(chunk, from)?;
        if let Some(i) = chunk.iter().rposition(|&b| b == b'\n') {
            start = from + i as u64 + 1;
            break;
        }
        start = from;
    }
    let mut line = vec![0u8; (end - start) as usize];
    reader.read_exact_at(&mut line, start)?;
    Ok(Some(line))
}

/// Where the audit chain stands when the hub opens its log (`open_chain`).
pub struct Chain {
    /// The hash of the last record in the file, which the next record names as `prev`; None
    /// when nothing before it is known (a new log).
    pub(super) head: Option<Hash>,
    /// The next batch begins with a `chain_start` record giving this reason.
    pub(super) start: Option<String>,
    /// The `.head` file, rewritten with the head on a timer and at every stop
    /// (`Records::record_head_due`).
    pub(super) head_file: Option<File>,
}

impl Chain {
    /// A new log with no predecessor and no head file (tests, special files).
    pub fn new_log() -> Chain {
        Chain {
            head: None,
            start: Some("new audit log".into()),
            head_file: None,
        }
    }
}

/// How far back from the log's end `open_chain` looks for the record a lagging `.head` names:
/// the records of one `.head` interval (at most `limits.service_log_flush_ms`, 10 s) at any
/// rate this hub reaches fit many times over, and a head matching nothing in it is reported
/// as a cut without reading the rest of a large log.
const HEAD_SEARCH_BYTES: u64 = 256 * 1024 * 1024;

/// How many complete lines of the record file at `path` follow the last line whose hash is
/// `want`, searching back from the end over the lines that begin within its last `max_bytes`;
/// None when no line there has that hash. The file ends in a newline (`cut_torn_tail` ran first).
pub fn lines_after(path: &Path, want: &Hash, max_bytes: u64) -> io::Result<Option<u64>> {
    let reader = File::open(path)?;
    let len = reader.metadata()?.len();
    // Lines that begin within the last `max_bytes`: one byte more is read, the newline that
    // ends the line before the first of them.
    let whole_file = max_bytes >= len;
    let floor = if whole_file { 0 } else { len - max_bytes - 1 };
    // Lines are hashed from the last one back, a chunk at a time.
    let mut buf = vec![0u8; 1024 * 1024];
    let mut carry: Vec<u8> = Vec::new();
    let mut end = len;
    let mut after = 0u64;
    while end > floor {
        let start = end.saturating_sub(buf.len() as u64).max(floor);
        let chunk = &mut buf[..(end - start) as usize];
        reader.read_exact_at(chunk, start)?;
        // Lines end at newlines; the last byte of the file is one. `carry` is the part of a
        // line that began in an earlier chunk (its start not read yet), without its newline.
        let mut line_end = chunk.len();
        for i in (0..chunk.len()).rev() {
            if chunk[i] != b'\n' {
                continue;
            }
            if start + i as u64 + 1 == len {
                line_end = i;
                continue;
            }
            // The line from i + 1 to line_end (plus what carried over) is complete.
            let hash = if carry.is_empty() {
                audit_chain::line_hash(&chunk[i + 1..line_end])
            } else {
                let mut whole = chunk[i + 1..line_end].to_vec();
                whole.extend_from_slice(&carry);
                carry.clear();
                audit_chain::line_hash(&whole)
            };
            if hash == *want {
                return Ok(Some(after));
            }
            after += 1;
            line_end = i;
        }
        let mut rest = chunk[..line_end].to_vec();
        rest.extend_from_slice(&carry);
        carry = rest;
        end = start;
    }
    // The file's first line, when the search reached the start of the file.
    if whole_file && len > 0 && audit_chain::line_hash(&carry) == *want {
        return Ok(Some(after));
    }
    Ok(None)
}

/// Finds where the chain of the audit log at `path` (opened as `file`, its torn tail cut)
/// stands, and what the service log should say about it. A log with records continues from
/// its last one; an empty log continues the chain its `.head` file names (the log was
/// rotated: moved away and the hub restarted) with a `chain_start` saying so, or starts a new
/// chain. The `.head` file is rewritten at most once per interval (`Records::record_head_due`),
/// so after a SIGKILL or crash it may name a record a little before the log's last: that is
/// said at INFO with the number of records after it, which the head does not anchor, and the
/// chain continues. A `.head` that names no record near the log's end (records cut from it
/// while the hub was down, or the file replaced) is reported in a WARN and a `chain_start`,
/// and the chain continues from the log's last record.
pub fn open_chain(path: &Path, file: &File) -> io::Result<(Chain, Vec<(&'static str, String)>)> {
    let mut notes = Vec::new();
    if !file.metadata()?.is_file() {
        return Ok((Chain::new_log(), notes));
    }
    let head_path = audit_chain::head_path(path);
    let recorded = match audit_chain::read_head(&head_path) {
        Ok(h) => h,
        Err(e) => {
            notes.push(("WARN", format!("audit chain: {e}; ignoring it")));
            None
        }
    };
    let last = last_line(path)?.map(|l| audit_chain::line_hash(&l));
    let (head, start) = match (last, recorded) {
        (Some(last), recorded) => {
            let lagging = match recorded {
                Some(r) if r != last => lines_after(path, &r, HEAD_SEARCH_BYTES)?.map(|n| (r, n)),
                _ => None,
            };
            let start = match (recorded, lagging) {
                (Some(r), Some((_, n))) => {
                    notes.push((
                        "INFO",
                        format!(
                            "audit chain: {} names the record (sha256 {}) followed by the log's last {n} records: they were appended after the head file's last update (the hub ended without an orderly stop, by SIGKILL, crash or power loss, within the head's write interval), so it does not anchor them",
                            head_path.display(),
                            audit_chain::hex(&r),
                        ),
                    ));
                    None
                }
                (Some(r), None) if r != last => {
                    let why = format!(
                        "the chain head the hub last recorded ({}) is none of the log's records near its end: records may have been cut from the end of the log, or {} was replaced",
                        audit_chain::hex(&r),
                        head_path.display()
                    );
                    notes.push(("WARN", format!("audit chain: {why}")));
                    Some(why)
                }
                _ => None,
            };
            notes.push((
                "INFO",
                format!(
                    "audit chain continues from the log's last record (sha256 {})",
                    audit_chain::hex(&last)
                ),
            ));
            (Some(last), start)
        }
        (None, Some(r)) => {
            notes.push((
                "INFO",
                format!(
                    "audit chain: the log is new; its first record continues the chain recorded in {} (sha256 {})",
                    head_path.display(),
                    audit_chain::hex(&r)
                ),
            ));
            (
                Some(r),
                Some(format!(
                    "new audit log file; the chain continues from the last record of the file before it, as recorded in {}",
                    head_path.display()
                )),
            )
        }
        (None, None) => {
            notes.push((
                "INFO",
                "audit chain: a new log starts a new chain".to_owned(),
            ));
            (None, Some("new audit log".to_owned()))
        }
    };
    let head_file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&head_path)
        .map_err(|e| {
            notes.push((
                "WARN",
                format!(
                    "audit chain: cannot open {}: {e}; the chain head is not recorded beside the log",
                    head_path.display()
                ),
            ))
        })
        .ok();
    Ok((
        Chain {
            head,
            start,
            head_file,
        },
        notes,
    ))
}
