//! The audit log and the service log (SPEC §8): append-only files of mode 600, written in one
//! batch per event-loop iteration.
//!
//! Owns the on-disk form of both records and what happens when a write fails: the audit batch
//! is cut back to its last good length, the sends it carried are refused by the caller, and
//! records that gate nothing are kept (bounded) for the next attempt. Refuses: deciding what
//! to record (the hub core does that).

use crate::hub::AuditEvent;
use chrono::{SecondsFormat, Utc};
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Records that gate nothing and could not be written are kept up to this many bytes; past it
/// the oldest are dropped and the drop is counted in the service log.
const MAX_PENDING_AUDIT_BYTES: usize = 16 * 1024 * 1024;

/// Where records go. A seam so tests can make writes fail like a full disk.
pub trait Sink {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Cuts the file back to `len` bytes after a failed append.
    fn truncate(&mut self, len: u64) -> io::Result<()>;
    fn len(&mut self) -> io::Result<u64>;
}

impl Sink for File {
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.write_all(bytes)
    }
    fn truncate(&mut self, len: u64) -> io::Result<()> {
        self.set_len(len)
    }
    fn len(&mut self) -> io::Result<u64> {
        Ok(self.metadata()?.len())
    }
}

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
    use std::os::unix::fs::FileExt;
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

pub struct Records {
    audit: Box<dyn Sink>,
    /// The audit file's length after the last good append (None until first asked), so a
    /// failed batch can be cut back without an `fstat` before every append.
    audit_len: Option<u64>,
    /// The length before the last append and the part of it that gated nothing.
    last_batch: Option<(u64, String)>,
    /// Encoded records that gate nothing, waiting for the next flush.
    pending: String,
    service: Box<dyn Sink>,
    service_buf: String,
    dropped_audit: u64,
    audit_failing: bool,
}

impl Records {
    pub fn new(audit: Box<dyn Sink>, service: Box<dyn Sink>) -> Records {
        Records {
            audit,
            audit_len: None,
            last_batch: None,
            pending: String::new(),
            service,
            service_buf: String::new(),
            dropped_audit: 0,
            audit_failing: false,
        }
    }

    /// Replaces the audit sink, keeping the service log and anything buffered.
    pub fn set_audit(&mut self, audit: Box<dyn Sink>) {
        self.audit = audit;
        self.audit_len = None;
    }

    fn now_ts() -> String {
        Utc::now().to_rfc3339_opts(SecondsFormat::Micros, true)
    }

    /// Queues a record that gates nothing.
    pub fn audit(&mut self, event: &AuditEvent) {
        event.encode_into(&Self::now_ts(), &mut self.pending);
    }

    /// Queues a service-log line at `level`.
    pub fn log(&mut self, level: &str, line: &str) {
        self.service_buf.push_str(&Self::now_ts());
        self.service_buf.push(' ');
        self.service_buf.push_str(level);
        self.service_buf.push(' ');
        self.service_buf.push_str(line);
        self.service_buf.push('\n');
    }

    /// Writes the pending records and then `gated` in one append. On failure the file is cut
    /// back, the gated records are discarded (the caller refuses what they carried) and the
    /// pending ones are kept for the next flush.
    pub fn flush_audit<I: IntoIterator<Item = AuditEvent>>(
        &mut self,
        gated: I,
    ) -> Result<(), String> {
        let ts = Self::now_ts();
        let keep = self.pending.len();
        for ev in gated {
            ev.encode_into(&ts, &mut self.pending);
        }
        if self.pending.is_empty() {
            return Ok(());
        }
        let before = match self.audit_len {
            Some(len) => Ok(len),
            None => self.audit.len(),
        };
        match self.audit.append(self.pending.as_bytes()) {
            Ok(()) => {
                self.audit_len = before
                    .as_ref()
                    .ok()
                    .map(|len| len + self.pending.len() as u64);
                // Kept until the caller's commit settles, so `undo_last_batch` can take the
                // gated records back out and keep the rest.
                self.last_batch = match before {
                    Ok(len) if keep < self.pending.len() => {
                        Some((len, self.pending[..keep].to_owned()))
                    }
                    _ => None,
                };
                self.pending.clear();
                if self.audit_failing {
                    self.audit_failing = false;
                    self.log("INFO", "audit log writable again");
                }
                Ok(())
            }
            Err(e) => {
                if let Ok(len) = before {
                    let _ = self.audit.truncate(len);
                }
                self.audit_len = None;
                self.pending.truncate(keep);
                self.bound_pending();
                if !self.audit_failing {
                    self.audit_failing = true;
                    self.log(
                        "ERROR",
                        &format!(
                            "audit log write failed: {e}; sends are refused until it recovers"
                        ),
                    );
                }
                Err(e.to_string())
            }
        }
    }

    /// Takes the last batch back out of the audit log: the commit it gated failed after the
    /// append (the store's commit), so its `accepted`/`acked` records must not stand. The
    /// batch's records that gated nothing go back to the pending buffer for the next flush.
    pub fn undo_last_batch(&mut self) {
        let Some((len, ungated)) = self.last_batch.take() else {
            return;
        };
        if self.audit.truncate(len).is_ok() {
            self.audit_len = Some(len);
            self.pending.insert_str(0, &ungated);
        } else {
            self.audit_len = None;
            self.log(
                "ERROR",
                "audit log: could not take back a batch whose commit failed",
            );
        }
    }

    fn bound_pending(&mut self) {
        if self.pending.len() <= MAX_PENDING_AUDIT_BYTES {
            return;
        }
        let excess = self.pending.len() - MAX_PENDING_AUDIT_BYTES;
        let cut = self.pending[excess..]
            .find('\n')
            .map_or(self.pending.len(), |i| excess + i + 1);
        let dropped = self.pending[..cut].matches('\n').count() as u64;
        self.pending.drain(..cut);
        self.dropped_audit += dropped;
        self.log(
            "ERROR",
            &format!(
                "audit log unwritable: dropped {} unwritten records so far",
                self.dropped_audit
            ),
        );
    }

    /// Writes buffered service-log lines. A failing service log cannot be reported in itself;
    /// the lines go to stderr instead so they are not lost silently.
    pub fn flush_service(&mut self) {
        if self.service_buf.is_empty() {
            return;
        }
        if self.service.append(self.service_buf.as_bytes()).is_err() {
            let _ = io::stderr().write_all(self.service_buf.as_bytes());
        }
        self.service_buf.clear();
    }

    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty() || !self.service_buf.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    /// An in-memory file that fails its appends while `full` is set, after writing half.
    #[derive(Clone, Default)]
    struct MemSink {
        data: Rc<RefCell<Vec<u8>>>,
        full: Rc<RefCell<bool>>,
    }

    impl Sink for MemSink {
        fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
            if *self.full.borrow() {
                self.data
                    .borrow_mut()
                    .extend_from_slice(&bytes[..bytes.len() / 2]);
                return Err(io::Error::from_raw_os_error(28)); // ENOSPC
            }
            self.data.borrow_mut().extend_from_slice(bytes);
            Ok(())
        }
        fn truncate(&mut self, len: u64) -> io::Result<()> {
            self.data.borrow_mut().truncate(len as usize);
            Ok(())
        }
        fn len(&mut self) -> io::Result<u64> {
            Ok(self.data.borrow().len() as u64)
        }
    }

    #[test]
    fn a_torn_tail_is_cut_back_to_the_last_complete_line() {
        let dir = std::env::temp_dir().join(format!("agent-hub-torn-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("audit.jsonl");
        let long = "x".repeat(100_000); // a partial line longer than one read chunk
        for (text, cut) in [
            ("", 0),
            ("{}\n{}\n", 0),
            ("{}\n{\"v\":1,\"ts", 10),
            ("{\"partial", 9),
        ] {
            std::fs::write(&path, text).unwrap();
            let f = open_record_file(&path).unwrap();
            assert_eq!(cut_torn_tail(&path, &f).unwrap(), cut, "{text:?}");
            let left = std::fs::read_to_string(&path).unwrap();
            assert_eq!(left, text[..text.len() - cut as usize]);
        }
        std::fs::write(&path, format!("{{}}\n{long}")).unwrap();
        let f = open_record_file(&path).unwrap();
        assert_eq!(cut_torn_tail(&path, &f).unwrap(), long.len() as u64);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{}\n");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_undone_batch_leaves_only_its_ungated_records_for_later() {
        let audit = MemSink::default();
        let mut r = Records::new(Box::new(audit.clone()), Box::new(MemSink::default()));
        r.audit(&AuditEvent::Connected { conn: 1 });
        r.flush_audit(std::iter::empty()).unwrap();
        let good = audit.data.borrow().len();
        r.audit(&AuditEvent::Connected { conn: 2 });
        let gated = AuditEvent::Accepted {
            conn: Some(2),
            envelope: "{\"id\":\"x\"}".into(),
        };
        r.flush_audit([gated]).unwrap();
        r.undo_last_batch();
        assert_eq!(
            audit.data.borrow().len(),
            good,
            "the batch is gone from the file"
        );
        r.flush_audit(std::iter::empty()).unwrap();
        let text = String::from_utf8(audit.data.borrow().clone()).unwrap();
        assert!(
            text.contains("\"conn\":2") && !text.contains("accepted"),
            "{text}"
        );
    }

    #[test]
    fn failed_batch_is_cut_back_and_ungated_records_retried() {
        let audit = MemSink::default();
        let mut r = Records::new(Box::new(audit.clone()), Box::new(MemSink::default()));
        r.audit(&AuditEvent::Connected { conn: 1 });
        r.flush_audit(std::iter::empty()).unwrap();
        let good = audit.data.borrow().len();

        *audit.full.borrow_mut() = true;
        r.audit(&AuditEvent::Connected { conn: 2 });
        let gated = AuditEvent::Accepted {
            conn: Some(2),
            envelope: "{\"id\":\"x\"}".into(),
        };
        assert!(r.flush_audit([gated]).is_err());
        assert_eq!(audit.data.borrow().len(), good, "partial batch removed");

        *audit.full.borrow_mut() = false;
        r.flush_audit(std::iter::empty()).unwrap();
        let text = String::from_utf8(audit.data.borrow().clone()).unwrap();
        assert_eq!(text.lines().count(), 2);
        assert!(text.contains("\"conn\":2"));
        assert!(
            !text.contains("accepted"),
            "the refused send's record was not kept"
        );
    }
}
