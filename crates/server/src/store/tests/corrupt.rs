//! A queue store damaged behind the hub's back (raw SQL on the closed file) must fail the
//! load with a clear error naming the row and the column, never panic or restore nonsense
//! (`rows` module doc; issue 9: "no panic from configuration or disk").

use crate::store::sqlite::Sqlite;
use crate::store::{Store, StoreError, StoreOp};
use rusqlite::Connection;
use std::path::PathBuf;
use std::sync::Arc;

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("agent-hub-corrupt-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("queue.db")
}

/// A store holding two queued envelopes (seq 1 and 2, from a to b) and one remembered id
/// whose envelope was delivered (seq 3).
fn healthy(name: &str) -> PathBuf {
    let path = tmp(name);
    let mut s = Sqlite::open(&path, 1 << 30).unwrap();
    let insert = |seq: u64, id: &str| StoreOp::Insert {
        seq,
        agent: "b".into(),
        id: id.into(),
        sender: "a".into(),
        kind: "task".into(),
        correlation_id: None,
        text: Arc::from(format!(
            r#"{{"id":"{id}","from":"a","to":"b","ts":"2026-01-01T00:00:00Z","kind":"task","correlationId":null,"body":{{"secret":"BODY-MARKER"}}}}"#
        )),
        digest: [7; 32],
        accepted_ms: 1_700_000_000_000,
    };
    s.stage(&[insert(1, "one"), insert(2, "two"), insert(3, "three")])
        .unwrap();
    s.commit().unwrap();
    s.stage(&[
        StoreOp::Remove { seq: 3 },
        StoreOp::State {
            seq: 3,
            sender: "a".into(),
            id: "three".into(),
            state: "delivered".into(),
            detail: None,
            reader: Some(agent_hub_proto::wire::Reader::CliAwait),
            at_ms: 1_700_000_001_000,
        },
    ])
    .unwrap();
    s.commit().unwrap();
    path
}

/// Runs `sql` on the closed store, reopens it and returns the load's error text.
fn corrupt(name: &str, sql: &str) -> String {
    let path = healthy(name);
    {
        let c = Connection::open(&path).unwrap();
        c.execute_batch(sql)
            .unwrap_or_else(|e| panic!("{name}: {sql}: {e}"));
    }
    let mut s = Sqlite::open(&path, 1 << 30).unwrap();
    match s.load() {
        Err(e @ StoreError::Corrupt(_)) => e.to_string(),
        Err(e) => panic!("{name}: expected a corrupt-row error, got {e}"),
        Ok(l) => panic!(
            "{name}: loaded {} envelopes and {} ids from a corrupt store",
            l.envelopes.len(),
            l.ids.len()
        ),
    }
}

#[test]
fn a_healthy_store_loads() {
    let path = healthy("healthy");
    let loaded = Sqlite::open(&path, 1 << 30).unwrap().load().unwrap();
    assert_eq!(loaded.envelopes.len(), 2);
    assert_eq!(loaded.ids.len(), 3);
}

#[test]
fn every_corrupt_column_is_named_with_its_row() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "unknown-reader",
            "UPDATE envelopes SET reader = 'BODY-MARKER-reader' WHERE seq = 3",
            "row seq 3: reader is not one of unknown, cli-await",
        ),
        (
            "blob-reader",
            "UPDATE envelopes SET reader = x'00' WHERE seq = 3",
            "row seq 3: reader is a blob, not text",
        ),
        (
            "negative-seq",
            "UPDATE envelopes SET seq = -5 WHERE seq = 1",
            "seq is -5, outside 0..=4611686018427387904",
        ),
        (
            "huge-seq",
            "UPDATE envelopes SET seq = 9223372036854775807 WHERE seq = 2",
            "seq is 9223372036854775807, outside",
        ),
        (
            "negative-attempts",
            "UPDATE envelopes SET attempts = -1 WHERE seq = 2",
            "row seq 2: attempts is -1, outside 0..=4294967295",
        ),
        (
            "huge-attempts",
            "UPDATE envelopes SET attempts = 4294967296 WHERE seq = 1",
            "row seq 1: attempts is 4294967296",
        ),
        (
            "real-attempts",
            "UPDATE envelopes SET attempts = 1.5 WHERE seq = 1",
            "row seq 1: attempts is a real number, not an integer",
        ),
        (
            "negative-time",
            "UPDATE envelopes SET accepted_ms = -1 WHERE seq = 3",
            "row seq 3: accepted_ms is -1, outside 0..=253402300799999",
        ),
        (
            "absurd-time",
            "UPDATE envelopes SET state_ms = 9223372036854775807 WHERE seq = 1",
            "row seq 1: state_ms is 9223372036854775807",
        ),
        (
            "unknown-state",
            "UPDATE envelopes SET state = 'teleported' WHERE seq = 3",
            "row seq 3: state is not one of queued, delivered",
        ),
        (
            "short-digest",
            "UPDATE envelopes SET digest = zeroblob(31) WHERE seq = 2",
            "row seq 2: digest is 31 bytes, not 32",
        ),
        (
            "text-digest",
            "UPDATE envelopes SET digest = 'abc' WHERE seq = 2",
            "row seq 2: digest is text, not a blob",
        ),
        (
            "blob-id",
            "UPDATE envelopes SET id = X'00ff' WHERE seq = 1",
            "row seq 1: id is a blob, not text",
        ),
        (
            "empty-sender",
            "UPDATE envelopes SET sender = '' WHERE seq = 3",
            "row seq 3: sender is empty",
        ),
        (
            "invalid-utf8",
            "UPDATE envelopes SET text = CAST(X'7b22ff' AS TEXT) WHERE seq = 2",
            "row seq 2: text is not valid UTF-8 (bad byte at offset 2)",
        ),
        (
            "invalid-json",
            "UPDATE envelopes SET text = '{\"id\":\"two\",' WHERE seq = 2",
            "row seq 2: text is not valid JSON",
        ),
        (
            "not-an-object",
            "UPDATE envelopes SET text = '[1,2]' WHERE seq = 1",
            "row seq 1: text is not a JSON object",
        ),
        (
            "text-of-another-envelope",
            "UPDATE envelopes SET text = (SELECT text FROM envelopes WHERE seq = 2) WHERE seq = 1",
            "row seq 1: the envelope text's \"id\" differs from the row's id",
        ),
        (
            "text-for-another-recipient",
            "UPDATE envelopes SET recipient = 'c' WHERE seq = 2",
            "row seq 2: the envelope text's \"to\" differs from the row's recipient",
        ),
        (
            "text-without-from",
            "UPDATE envelopes SET text = '{\"id\":\"one\",\"to\":\"b\"}' WHERE seq = 1",
            "row seq 1: text lacks a string id, from or to",
        ),
        (
            "duplicate-id",
            "UPDATE envelopes SET id = 'one', text = NULL WHERE seq = 2",
            "rows seq 1 and seq 2 hold the same sender and id",
        ),
        (
            // The primary key forbids a second seq 2; a rebuilt table without it does not.
            "duplicate-seq",
            "CREATE TABLE t AS SELECT * FROM envelopes; DROP TABLE envelopes;
             ALTER TABLE t RENAME TO envelopes;
             INSERT INTO envelopes SELECT * FROM envelopes WHERE seq = 2;",
            "seq 2 appears more than once",
        ),
    ];
    for (name, sql, want) in cases {
        let e = corrupt(name, sql);
        assert!(e.contains(want), "{name}: {e}");
        assert!(
            e.contains("restore the store from a backup"),
            "{name}: says what to do: {e}"
        );
        assert!(
            !e.contains("BODY-MARKER"),
            "{name}: no envelope content in the error: {e}"
        );
    }
}

/// SQLite's own integrity: a file whose pages are garbage fails at open or load with an
/// error, not a panic.
#[test]
fn a_file_of_garbage_is_an_error() {
    let path = healthy("garbage");
    let len = std::fs::metadata(&path).unwrap().len() as usize;
    let mut bytes = std::fs::read(&path).unwrap();
    // Keep the 100-byte header, scramble every page after it.
    for (i, b) in bytes.iter_mut().enumerate().skip(100) {
        *b = (i as u8).wrapping_mul(31) ^ 0x5a;
    }
    std::fs::write(&path, &bytes[..len]).unwrap();
    let _ = std::fs::remove_file(path.with_extension("db-wal"));
    let r = Sqlite::open(&path, 1 << 30).and_then(|mut s| s.load());
    assert!(r.is_err(), "garbage loaded: {:?}", r.map(|l| l.ids.len()));
}

/// A store holding one delegated task row besides the healthy envelopes.
const TASK_ID: &str = "task-0123456789abcdef0123456789abcdef";

fn with_task(name: &str) -> PathBuf {
    let path = healthy(name);
    let mut s = Sqlite::open(&path, 1 << 30).unwrap();
    s.stage(&[StoreOp::Task(crate::store::TaskStoreOp::Insert(Box::new(
        crate::store::StoredTask {
            seq: 1,
            task: TASK_ID.into(),
            delegator: "a".into(),
            agent: "codex".into(),
            cwd: "/w/CWD-MARKER".into(),
            prompt: "PROMPT-MARKER".into(),
            timeout_secs: 60,
            state: "running".into(),
            created_ms: 1_700_000_000_000,
            ..Default::default()
        },
    )))])
    .unwrap();
    s.commit().unwrap();
    path
}

#[test]
fn every_corrupt_task_column_is_named_without_quoting_the_record() {
    let cases: &[(&str, &str, &str)] = &[
        (
            "task-id-shape",
            "UPDATE tasks SET task = '../../etc/passwd'",
            "task row seq 1: task is not task- and 32 hex digits",
        ),
        (
            "task-state",
            "UPDATE tasks SET state = 'teleported'",
            "task row seq 1: state is not one of queued, running",
        ),
        (
            "task-prompt-blob",
            "UPDATE tasks SET prompt = X'00ff'",
            "task row seq 1: prompt is a blob, not text",
        ),
        (
            "task-negative-pid",
            "UPDATE tasks SET pid = -1",
            "task row seq 1: pid is -1, outside",
        ),
        (
            "task-huge-timeout",
            "UPDATE tasks SET timeout_secs = 99999999999",
            "task row seq 1: timeout_secs is 99999999999",
        ),
        (
            "task-empty-delegator",
            "UPDATE tasks SET delegator = ''",
            "task row seq 1: delegator is empty",
        ),
        (
            "task-time",
            "UPDATE tasks SET created_ms = -3",
            "task row seq 1: created_ms is -3, outside",
        ),
        (
            "task-seq",
            "UPDATE tasks SET seq = -1",
            "seq is -1, outside 0..=",
        ),
        (
            "task-permission",
            "UPDATE tasks SET permission = 'always'",
            "task row seq 1: permission is not one of ask, reject, allow (it holds 6 characters)",
        ),
        (
            "task-allow",
            "UPDATE tasks SET allow = '[{\"kinds\":[\"fly\"]}]'",
            "task row seq 1: allow is not a list of at most 8 allow rules",
        ),
    ];
    for (name, sql, want) in cases {
        let path = with_task(name);
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch(sql).unwrap();
        }
        let err = match Sqlite::open(&path, 1 << 30).unwrap().load_tasks() {
            Err(e @ StoreError::Corrupt(_)) => e.to_string(),
            Err(e) => panic!("{name}: expected a corrupt-row error, got {e}"),
            Ok(l) => panic!("{name}: loaded {} tasks from a corrupt store", l.len()),
        };
        assert!(err.contains(want), "{name}: {err}");
        assert!(
            !err.contains("PROMPT-MARKER"),
            "{name} quotes the record: {err}"
        );
    }
}

/// A store with one open request row of `with_task`'s task (schema 5, issue 37).
fn with_request(name: &str) -> PathBuf {
    let path = with_task(name);
    let mut s = Sqlite::open(&path, 1 << 30).unwrap();
    s.stage(&[StoreOp::Task(crate::store::TaskStoreOp::OpenRequest(
        crate::store::StoredRequest {
            request: "req-0123456789abcdef".into(),
            task: TASK_ID.into(),
            seq: 1,
            kind: "permission".into(),
            tool_kind: Some("execute".into()),
            opened_ms: 1_700_000_000_000,
            expires_ms: 1_700_000_600_000,
        },
    ))])
    .unwrap();
    s.commit().unwrap();
    path
}

/// A request row the hub cannot have written stops the start with the row and the column
/// named, as every other row does (issue 37 design §4.6: the restart trusts nothing).
#[test]
fn every_corrupt_request_column_is_named() {
    let healthy = with_request("request-healthy");
    let rows = Sqlite::open(&healthy, 1 << 30)
        .unwrap()
        .load_requests()
        .unwrap();
    assert_eq!(rows.len(), 1);
    let cases: &[(&str, &str, &str)] = &[
        (
            "request-id",
            "UPDATE requests SET request = 'req-../etc'",
            "request row rowid 1: request is not req- and 16 hex digits",
        ),
        (
            "request-task",
            "UPDATE requests SET task = 'nobody'",
            "request row rowid 1: task is not task- and 32 hex digits",
        ),
        (
            "request-type",
            "UPDATE requests SET type = 'demand'",
            "request row rowid 1: type is not one of permission, question",
        ),
        (
            "request-seq",
            "UPDATE requests SET seq = 0",
            "request row rowid 1: seq is 0, outside 1..=4294967295",
        ),
        (
            "request-time",
            "UPDATE requests SET expires_ms = 'soon'",
            "request row rowid 1: expires_ms is text, not an integer",
        ),
    ];
    for (name, sql, want) in cases {
        let path = with_request(name);
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch(sql).unwrap();
        }
        let err = match Sqlite::open(&path, 1 << 30).unwrap().load_requests() {
            Err(e @ StoreError::Corrupt(_)) => e.to_string(),
            Err(e) => panic!("{name}: expected a corrupt-row error, got {e}"),
            Ok(l) => panic!("{name}: loaded {} requests from a corrupt store", l.len()),
        };
        assert!(err.contains(want), "{name}: {err}");
    }
}
