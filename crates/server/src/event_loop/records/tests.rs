//! `records`: the audit batch and its chain across undone and failed batches, the `.head`
//! file's interval and what a lagging head means at startup, torn tails, and the service
//! log's buffering (tests of `records.rs`, kept apart so it stays under ~1,000 lines).

use super::*;
use std::cell::RefCell;
use std::path::Path;
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

/// The text verifies as one chain from a chain_start; returns the records' events.
fn assert_chain_holds(text: &str) -> Vec<String> {
    let mut v = audit_chain::Verifier::new(vec!["mem".into()]);
    let mut events = Vec::new();
    for (i, line) in text.lines().enumerate() {
        v.line(0, i as u64 + 1, line.as_bytes())
            .unwrap_or_else(|b| panic!("broken: {b:?}\n{text}"));
        let r: serde_json::Value = serde_json::from_str(line).unwrap();
        events.push(r["event"].as_str().unwrap().to_owned());
    }
    v.finish().unwrap();
    events
}

/// The undone batch took a chain_start, records that gated nothing and a gated one
/// with it; what is written next links to the last record that stayed in the file, and a
/// batch cut back after a failed append leaves the chain as it was.
#[test]
fn the_chain_stays_whole_across_undone_and_failed_batches() {
    let audit = MemSink::default();
    let mut r = Records::new(Box::new(audit.clone()), Box::new(MemSink::default()));
    let accepted = |id: &str| AuditEvent::Accepted {
        conn: Some(2),
        envelope: format!("{{\"id\":\"{id}\"}}").into(),
    };
    // The very first batch is undone: the chain_start goes with it and comes back.
    r.audit(&AuditEvent::Connected { conn: 1 });
    r.flush_audit([accepted("a")]).unwrap();
    r.undo_last_batch();
    assert!(audit.data.borrow().is_empty());
    r.flush_audit(std::iter::empty()).unwrap();
    let kept = r.chain_head();
    r.audit(&AuditEvent::Connected { conn: 2 });
    r.flush_audit([accepted("b")]).unwrap();
    r.undo_last_batch();
    assert_eq!(r.chain_head(), kept, "the head is the last record left");
    *audit.full.borrow_mut() = true;
    assert!(r.flush_audit([accepted("c")]).is_err());
    assert_eq!(r.chain_head(), kept);
    *audit.full.borrow_mut() = false;
    r.flush_audit([accepted("d")]).unwrap();
    // Regression: an attempt that wrote nothing (a commit of purges alone) then failed
    // must not take back the batch before it, which its own commit had settled.
    r.flush_audit(std::iter::empty()).unwrap();
    r.undo_last_batch();
    let text = String::from_utf8(audit.data.borrow().clone()).unwrap();
    let events = assert_chain_holds(&text);
    assert_eq!(
        events,
        ["chain_start", "connected", "connected", "accepted"],
        "{text}"
    );
    assert!(text.contains("\"id\":\"d\"") && !text.contains("\"id\":\"b\""));
}

#[test]
fn the_chain_continues_from_the_file_or_its_head_file_and_says_when_they_disagree() {
    let dir = std::env::temp_dir().join(format!("agent-hub-chain-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("audit.jsonl");
    let head_path = audit_chain::head_path(&path);
    let run = |events: u32| -> (String, Vec<(&'static str, String)>) {
        let file = open_record_file(&path).unwrap();
        cut_torn_tail(&path, &file).unwrap();
        let (chain, notes) = open_chain(&path, &file).unwrap();
        let mut r = Records::new(Box::new(MemSink::default()), Box::new(MemSink::default()));
        r.set_audit(Box::new(file), chain);
        for conn in 0..events {
            r.audit(&AuditEvent::Connected {
                conn: u64::from(conn),
            });
            r.flush_audit(std::iter::empty()).unwrap();
        }
        (r.chain_head().unwrap_or_default(), notes)
    };
    // A new log, then a restart that continues it without a second chain_start.
    let (head1, notes) = run(2);
    assert!(notes
        .iter()
        .any(|(_, n)| n.contains("a new log starts a new chain")));
    let (head2, notes) = run(1);
    assert!(notes.iter().any(|(_, n)| n.contains(&head1)), "{notes:?}");
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        assert_chain_holds(&text)
            .iter()
            .filter(|e| *e == "chain_start")
            .count(),
        1
    );
    assert_eq!(std::fs::read_to_string(&head_path).unwrap().trim(), head2);
    // Rotation: the log moved away, the hub restarted on a new file.
    let old = dir.join("audit.jsonl.1");
    std::fs::rename(&path, &old).unwrap();
    let (head3, _) = run(1);
    let out = audit_chain::verify_files(&[old.clone(), path.clone()], &[])
        .unwrap()
        .unwrap();
    assert_eq!(out.records, 6);
    assert_eq!(out.head.map(|h| audit_chain::hex(&h)), Some(head3.clone()));
    assert!(
        out.notes
            .iter()
            .any(|n| n.contains("chain_start: new audit log file")),
        "{:?}",
        out.notes
    );
    // The log's last record cut off while the hub was down: the next start says so in a
    // chain_start, and the chain still verifies from there on.
    let text = std::fs::read_to_string(&path).unwrap();
    let cut = &text[..text[..text.len() - 1].rfind('\n').unwrap() + 1];
    std::fs::write(&path, cut).unwrap();
    let err = audit_chain::verify_files(std::slice::from_ref(&path), &[])
        .unwrap()
        .unwrap_err();
    assert!(err.why.contains("records were cut from the end"), "{err:?}");
    let (_, notes) = run(1);
    assert!(
        notes
            .iter()
            .any(|(l, n)| *l == "WARN" && n.contains("none of the log's records near its end")),
        "{notes:?}"
    );
    let out = audit_chain::verify_files(std::slice::from_ref(&path), &[])
        .unwrap()
        .unwrap();
    assert!(
        out.notes
            .iter()
            .any(|n| n.contains("records may have been cut")),
        "{:?}",
        out.notes
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A fresh dir holding `audit.jsonl`, for the tests that rewrite it.
fn chain_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("agent-hub-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Opens the log at `path` as the hub's startup does; the notes and whether a
/// chain_start is due.
fn open_as_hub(path: &Path) -> (Vec<(&'static str, String)>, Option<String>) {
    let file = open_record_file(path).unwrap();
    cut_torn_tail(path, &file).unwrap();
    let (chain, notes) = open_chain(path, &file).unwrap();
    (notes, chain.start)
}

/// The `.head` file is written on its interval, not per batch: a batch arms the deadline
/// (`due`), the iterations before it leave the file alone, the one at it writes once, a
/// stop writes at once, and a zero interval writes every iteration. Time is passed in.
#[test]
fn the_head_file_is_written_once_per_interval_and_at_every_stop() {
    let dir = chain_dir("head-timer");
    let path = dir.join("audit.jsonl");
    let head_path = audit_chain::head_path(&path);
    let file = open_record_file(&path).unwrap();
    let (chain, _) = open_chain(&path, &file).unwrap();
    let mut r = Records::new(Box::new(MemSink::default()), Box::new(MemSink::default()));
    r.set_service_flush(Duration::from_millis(100));
    r.set_audit(Box::new(file), chain);
    let on_disk = || {
        audit_chain::read_head(&head_path)
            .unwrap()
            .map(|h| audit_chain::hex(&h))
    };
    assert_eq!(r.due(), None, "nothing moved");
    r.audit(&AuditEvent::Connected { conn: 1 });
    r.flush_audit(std::iter::empty()).unwrap();
    let due = r.head_due().expect("a moved head arms the interval");
    assert_eq!(r.due(), Some(due));
    let first = r.chain_head();
    r.flush_due(due - Duration::from_millis(1));
    assert_eq!(on_disk(), None, "not before the interval");
    // A second batch within the interval keeps the first deadline.
    r.audit(&AuditEvent::Connected { conn: 2 });
    r.flush_audit(std::iter::empty()).unwrap();
    assert_eq!(r.head_due(), Some(due));
    assert_ne!(r.chain_head(), first);
    r.flush_due(due);
    assert_eq!(on_disk(), r.chain_head(), "the latest head, once");
    assert_eq!(r.head_due(), None);
    // Nothing moved: later iterations write nothing (the file's contents are replaced
    // to see it).
    std::fs::write(&head_path, "").unwrap();
    r.flush_due(due + Duration::from_secs(1));
    assert_eq!(on_disk(), None);
    // A stop writes a moved head whatever the interval.
    r.audit(&AuditEvent::Connected { conn: 3 });
    r.flush_audit(std::iter::empty()).unwrap();
    r.record_head_moved();
    assert_eq!(on_disk(), r.chain_head());
    assert_eq!(r.due(), None);
    // So does dropping the records (an error return from the loop).
    r.audit(&AuditEvent::Connected { conn: 4 });
    r.flush_audit(std::iter::empty()).unwrap();
    let last = r.chain_head();
    assert_ne!(on_disk(), last);
    drop(r);
    assert_eq!(on_disk(), last);
    // A zero interval: every iteration that moved the head writes it.
    let file = open_record_file(&path).unwrap();
    let (chain, _) = open_chain(&path, &file).unwrap();
    let mut r = Records::new(Box::new(MemSink::default()), Box::new(MemSink::default()));
    r.set_service_flush(Duration::ZERO);
    r.set_audit(Box::new(file), chain);
    r.audit(&AuditEvent::Connected { conn: 5 });
    r.flush_audit(std::iter::empty()).unwrap();
    r.flush_due(Instant::now() - Duration::from_secs(1));
    assert_eq!(on_disk(), r.chain_head());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Attacks on a head that may lag: a `.head` naming a record before the log's last is a
/// lag (INFO with the count, no chain_start, `audit verify` intact with the count); a
/// `.head` naming no record is a cut or a replaced head (WARN, chain_start, verify broken).
#[test]
fn a_lagging_head_is_told_apart_from_a_cut_log_or_a_replaced_head() {
    let dir = chain_dir("head-lag");
    let path = dir.join("audit.jsonl");
    let head_path = audit_chain::head_path(&path);
    {
        let file = open_record_file(&path).unwrap();
        let (chain, _) = open_chain(&path, &file).unwrap();
        let mut r = Records::new(Box::new(MemSink::default()), Box::new(MemSink::default()));
        r.set_audit(Box::new(file), chain);
        for conn in 0..6 {
            r.audit(&AuditEvent::Connected { conn });
            r.flush_audit(std::iter::empty()).unwrap();
        }
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 7, "chain_start and six records");
    let hash_of = |i: usize| audit_chain::hex(&audit_chain::line_hash(lines[i].as_bytes()));
    let set = |keep: usize, head: &str| {
        let mut t: String = lines[..keep].iter().map(|l| format!("{l}\n")).collect();
        if keep == 0 {
            t.clear();
        }
        std::fs::write(&path, t).unwrap();
        std::fs::write(&head_path, format!("{head}\n")).unwrap();
    };
    let verify = || audit_chain::verify_files(std::slice::from_ref(&path), &[]).unwrap();
    // The hub killed with its head 3 records behind (and, the extreme, at line 1).
    for (head_at, after) in [(3usize, 3u64), (0, 6)] {
        set(7, &hash_of(head_at));
        let (notes, start) = open_as_hub(&path);
        assert_eq!(start, None, "a lag is not a cut: {notes:?}");
        assert!(notes.iter().all(|(l, _)| *l == "INFO"), "{notes:?}");
        let want = format!("followed by the log's last {after} records");
        assert!(notes.iter().any(|(_, n)| n.contains(&want)), "{notes:?}");
        let out = verify().unwrap();
        assert_eq!(out.records, 7);
        let want = format!(
            ":{}; the {after} records after it are not anchored",
            head_at + 1
        );
        assert!(
            out.notes.iter().any(|n| n.contains(&want)),
            "{:?}",
            out.notes
        );
    }
    // The records after that head cut off: the log ends at its head, nothing to say.
    set(4, &hash_of(3));
    let (notes, start) = open_as_hub(&path);
    assert_eq!(start, None);
    assert!(
        notes
            .iter()
            .all(|(l, n)| *l == "INFO" && !n.contains("followed")),
        "{notes:?}"
    );
    assert!(verify()
        .unwrap()
        .notes
        .iter()
        .all(|n| !n.contains("anchored")));
    // The log's tail cut by one record, and cut to before a lagging head: the head names
    // no record of the log.
    for (keep, head_at) in [(6usize, 6usize), (3, 4)] {
        set(keep, &hash_of(head_at));
        let (notes, start) = open_as_hub(&path);
        assert!(
            notes
                .iter()
                .any(|(l, n)| *l == "WARN" && n.contains("none of the log's records")),
            "{keep}: {notes:?}"
        );
        assert!(start.unwrap().contains("records may have been cut"));
        let b = verify().unwrap_err();
        assert!(b.why.contains("records were cut from the end"), "{b:?}");
        assert_eq!(b.line, keep as u64 + 1);
    }
    // A replaced head: a hash of no record at all.
    set(7, &"5a".repeat(32));
    let (notes, start) = open_as_hub(&path);
    assert!(notes.iter().any(|(l, _)| *l == "WARN"), "{notes:?}");
    assert!(start.is_some());
    assert!(verify().is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

/// `lines_after` counts what a forward scan counts, for lines longer than its read chunk,
/// at every line, within its byte bound and not past it.
#[test]
fn lines_after_counts_back_from_the_end_across_chunks() {
    let dir = chain_dir("lines-after");
    let path = dir.join("log");
    let lens = [1usize, 70, 1024 * 1024 - 1, 5, 2 * 1024 * 1024 + 3, 0, 9];
    let lines: Vec<String> = lens
        .iter()
        .enumerate()
        .map(|(i, &n)| "x".repeat(n) + &i.to_string())
        .collect();
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&path, &text).unwrap();
    for (i, l) in lines.iter().enumerate() {
        let h = audit_chain::line_hash(l.as_bytes());
        let after = (lines.len() - 1 - i) as u64;
        assert_eq!(
            lines_after(&path, &h, u64::MAX).unwrap(),
            Some(after),
            "line {i}"
        );
        // Bounded to the bytes from this line's start: still found; one byte less: not.
        let from: usize = lines[i..].iter().map(|l| l.len() + 1).sum();
        assert_eq!(
            lines_after(&path, &h, from as u64).unwrap(),
            Some(after),
            "{i}"
        );
        assert_eq!(
            lines_after(&path, &h, from as u64 - 1).unwrap(),
            None,
            "{i}"
        );
    }
    assert_eq!(lines_after(&path, &[7; 32], u64::MAX).unwrap(), None);
    std::fs::write(&path, "").unwrap();
    assert_eq!(lines_after(&path, &[7; 32], u64::MAX).unwrap(), None);
    let _ = std::fs::remove_dir_all(&dir);
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
    assert_chain_holds(&text);
}

/// INFO lines wait for the flush interval and go out in one append; a WARN line, the size
/// bound, a zero interval and `flush_service` (every stop) write at once; `service_due` is
/// the deadline the loop sleeps to. Time is passed in: no sleeping.
#[test]
fn service_lines_are_buffered_for_the_interval_and_written_in_one_append() {
    #[derive(Clone, Default)]
    struct Counting {
        data: Rc<RefCell<Vec<u8>>>,
        appends: Rc<RefCell<u32>>,
    }
    impl Sink for Counting {
        fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
            *self.appends.borrow_mut() += 1;
            self.data.borrow_mut().extend_from_slice(bytes);
            Ok(())
        }
        fn truncate(&mut self, _: u64) -> io::Result<()> {
            Ok(())
        }
        fn len(&mut self) -> io::Result<u64> {
            Ok(self.data.borrow().len() as u64)
        }
    }
    let service = Counting::default();
    let mut r = Records::new(Box::new(MemSink::default()), Box::new(service.clone()));
    let every = Duration::from_millis(100);
    r.set_service_flush(every);
    let t0 = Instant::now();
    r.log("INFO", "one");
    // The deadline is set by the line itself, not by the next flush_service_due: a line
    // queued after an iteration's flush must still bound the loop's sleep.
    let due = r.service_due().expect("a waiting line sets the deadline");
    assert!(due >= t0 + every, "INFO waits the interval");
    r.flush_service_due(t0);
    r.log("INFO", "two");
    r.flush_service_due(t0 + Duration::from_millis(50));
    assert_eq!(*service.appends.borrow(), 0, "INFO lines wait");
    assert_eq!(r.service_due(), Some(due), "due from the first line");
    r.flush_service_due(due);
    assert_eq!(*service.appends.borrow(), 1, "both in one append");
    let text = String::from_utf8(service.data.borrow().clone()).unwrap();
    assert!(text.contains(" INFO one\n"), "{text}");
    assert!(text.ends_with(" INFO two\n"), "{text}");
    assert_eq!(r.service_due(), None, "nothing waits");
    // A WARN line goes at the end of its iteration, with the INFO lines before it.
    r.log("INFO", "three");
    r.log("WARN", "four");
    r.flush_service_due(t0 + every);
    assert_eq!(*service.appends.borrow(), 2);
    // A burst past the size bound is written before the interval ends.
    let long = "x".repeat(SERVICE_BUF_FLUSH_BYTES);
    r.log("INFO", &long);
    r.flush_service_due(t0 + every);
    assert_eq!(*service.appends.borrow(), 3);
    // A stop writes what waits, whatever the interval.
    r.log("INFO", "five");
    r.flush_service_due(t0 + every);
    assert_eq!(*service.appends.borrow(), 3);
    r.flush_service();
    assert_eq!(*service.appends.borrow(), 4);
    assert!(String::from_utf8(service.data.borrow().clone())
        .unwrap()
        .ends_with(" INFO five\n"));
    // Dropping the records (an error return from the loop) writes what waits too.
    r.log("INFO", "six");
    drop(r);
    assert!(String::from_utf8(service.data.borrow().clone())
        .unwrap()
        .ends_with(" INFO six\n"));
    // With a zero interval every iteration writes its lines.
    let service = Counting::default();
    let mut r = Records::new(Box::new(MemSink::default()), Box::new(service.clone()));
    r.set_service_flush(Duration::ZERO);
    r.log("INFO", "seven");
    r.flush_service_due(t0);
    assert_eq!(*service.appends.borrow(), 1);
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
    assert_eq!(
        text.lines().count(),
        3,
        "chain_start and two records: {text}"
    );
    assert!(text.contains("\"conn\":2"));
    assert_chain_holds(&text);
    assert!(
        !text.contains("accepted"),
        "the refused send's record was not kept"
    );
}
