//! The SQLite queue store: one database file, WAL journal, a lock file so two hubs can never
//! share it, and a versioned schema (docs/operations.md, "Queue store schema and migrations").
//! Commits run with `synchronous=NORMAL` (in the WAL, safe against a hub crash); with
//! `store.sync = "full"` the WAL is then flushed to disk by `flush::Flusher` off the event
//! loop, and replies that promise durability wait for that flush. Checkpoints run on that
//! thread too, on a second connection (`flush` module doc): the loop's connection never
//! checkpoints.
//!
//! Owns the SQL. Refuses: deciding what to store.

use super::flush::{Background, WalFlush};
use super::sqlite_wal::{lock_store, on_wal_commit, SqliteCheckpoint};
use super::{rows, Loaded, Store, StoreError, StoreOp, StoredTask, TaskStoreOp};
use crate::config::SyncPolicy;
use rusqlite::{ffi, params, Connection, OptionalExtension};
use std::fs::File;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// The schema this binary writes. Bump it with a migration step in `migrate` and a line in
/// docs/operations.md.
pub const SCHEMA_VERSION: i64 = 3;

/// How long a commit on the loop's connection waits for a lock the checkpoint connection
/// holds (`open_with`).
const LOOP_BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(100);

pub struct Sqlite {
    /// Declared first so it closes before the fields its WAL hook and lock rely on.
    conn: Connection,
    in_txn: bool,
    /// The WAL file to flush after each commit (`store.sync = "full"`), or None.
    flush: Option<PathBuf>,
    /// The checkpoints' connection, until the loop hands it to the flush thread.
    checkpointer: Option<SqliteCheckpoint>,
    /// WAL frames after the last commit, stored by `on_wal_commit` (installed on `conn`).
    wal_frames: Arc<AtomicU32>,
    /// The open lock file: one hub per store (`lock_store`).
    _lock: File,
}

/// Version 2: one row per accepted envelope, keyed by acceptance order. The row is the queue
/// entry while `text` is set and the remembered id (idempotent send, status) until forgotten.
/// Keyed by `seq`, every write lands on the table's last pages, which a commit already holds,
/// instead of a random leaf of an index per send (version 1 had a second table keyed by
/// sender and id).
const SCHEMA_V2: &str = "
CREATE TABLE envelopes (
    seq            INTEGER PRIMARY KEY,
    sender         TEXT NOT NULL,
    id             TEXT NOT NULL,
    recipient      TEXT NOT NULL,
    kind           TEXT NOT NULL,
    correlation_id TEXT,
    text           TEXT,
    attempts       INTEGER NOT NULL DEFAULT 0,
    digest         BLOB NOT NULL,
    accepted_ms    INTEGER NOT NULL,
    state          TEXT NOT NULL,
    detail         TEXT,
    state_ms       INTEGER NOT NULL
);
";

/// Version 3 adds delegated tasks (docs/delegation.md "Durability"): one row per task, written
/// whole on each change. `seq` is the acceptance order, which a restart keeps for the queue.
const SCHEMA_V3_TASKS: &str = "
CREATE TABLE tasks (
    seq           INTEGER PRIMARY KEY,
    task          TEXT NOT NULL UNIQUE,
    delegator     TEXT NOT NULL,
    agent         TEXT NOT NULL,
    peer          TEXT,
    cwd           TEXT NOT NULL,
    prompt        TEXT NOT NULL,
    timeout_secs  INTEGER NOT NULL,
    progress_secs INTEGER NOT NULL,
    state         TEXT NOT NULL,
    created_ms    INTEGER NOT NULL,
    started_ms    INTEGER,
    ended_ms      INTEGER,
    elapsed_ms    INTEGER,
    stop_reason   TEXT,
    reason        TEXT,
    pid           INTEGER
);
";

/// Version 2 to 3: the tasks table; envelopes are untouched.
const MIGRATE_2_TO_3: &str = "UPDATE meta SET value = '3' WHERE key = 'schema_version';";

/// Version 1 to 2: queued envelopes keep their `seq` and take their remembered columns;
/// remembered ids whose envelope left its queue get fresh keys after every queued one (any
/// unique key will do: startup continues numbering after the largest).
/// (Run between renaming version 1's `envelopes` to `envelopes_v1` and creating `SCHEMA_V2`.)
const MIGRATE_1_TO_2: &str = "
INSERT INTO envelopes
    SELECT e.seq, e.sender, e.id, e.agent, e.kind, e.correlation_id, e.text, e.attempts,
           coalesce(r.digest, zeroblob(32)), coalesce(r.accepted_ms, 0),
           coalesce(r.state, 'queued'), r.detail, coalesce(r.state_ms, 0)
    FROM envelopes_v1 e LEFT JOIN remembered r ON r.sender = e.sender AND r.id = e.id;
INSERT INTO envelopes
    SELECT (SELECT coalesce(max(seq), 0) FROM envelopes_v1) + r.rowid, r.sender, r.id,
           r.recipient, '', NULL, NULL, 0, r.digest, r.accepted_ms, r.state, r.detail,
           r.state_ms
    FROM remembered r
    WHERE NOT EXISTS (SELECT 1 FROM envelopes_v1 e WHERE e.sender = r.sender AND e.id = r.id);
DROP TABLE envelopes_v1;
DROP TABLE remembered;
UPDATE meta SET value = '2' WHERE key = 'schema_version';
";

pub(super) fn open_err(e: rusqlite::Error) -> StoreError {
    StoreError::Open(e.to_string())
}

/// An open step failed. Another process holding the file's lock shows up as "database is
/// locked" at whichever step first touches the file, so that case names the likely cause.
fn locked_err(e: rusqlite::Error) -> StoreError {
    let busy = matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    );
    if busy {
        StoreError::Open(format!(
            "{e} (is another agent-hub-server using this store?)"
        ))
    } else {
        open_err(e)
    }
}

/// SQLite's write-ahead log beside the database: the same name with `-wal` appended.
fn wal_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push("-wal");
    PathBuf::from(name)
}

fn write_err(e: rusqlite::Error) -> StoreError {
    StoreError::Write(e.to_string())
}

impl Drop for Sqlite {
    fn drop(&mut self) {
        // SAFETY: the handle is this struct's open connection; removing the hook before the
        // counter it points to is dropped (see `on_wal_commit`).
        unsafe {
            ffi::sqlite3_wal_hook(self.conn.handle(), None, std::ptr::null_mut());
        }
    }
}

impl Sqlite {
    /// Opens (creating if needed) the database at `path`. `max_bytes` caps its size: past it
    /// writes fail as on a full disk, and sends are refused until deliveries free room.
    pub fn open(path: &Path, max_bytes: u64) -> Result<Sqlite, StoreError> {
        Sqlite::open_with(path, max_bytes, SyncPolicy::Full)
    }

    /// `open` with the commit policy of `store.sync` (SPEC §12.1).
    pub fn open_with(path: &Path, max_bytes: u64, sync: SyncPolicy) -> Result<Sqlite, StoreError> {
        // The store holds bodies: create it 600 (SQLite gives its -wal file the same mode) and
        // tighten a looser existing file.
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| StoreError::Open(format!("{}: {e}", path.display())))?;
        let meta = file
            .metadata()
            .map_err(|e| StoreError::Open(e.to_string()))?;
        if meta.permissions().mode() & 0o077 != 0 {
            file.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(|e| StoreError::Open(e.to_string()))?;
        }
        drop(file);
        let lock = lock_store(path)?;
        let conn = Connection::open(path).map_err(locked_err)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(locked_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Open(format!(
                "journal_mode WAL not available (got {mode})"
            )));
        }
        // FULL would fsync inside COMMIT, on the event loop; the flush thread does that part
        // instead (module doc), so SQLite itself only writes.
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(locked_err)?;
        // Checkpoints run on the flush thread; this connection never runs one. (Setting this
        // pragma replaces the WAL hook, so the hook is installed after it.)
        conn.pragma_update(None, "wal_autocheckpoint", 0)
            .map_err(locked_err)?;
        // The checkpoint connection takes SQLite's WAL-index locks for microseconds at a time
        // (never the write lock: PASSIVE only). A commit that meets one waits it out instead
        // of failing a send; anything longer is a real fault and fails the commit.
        conn.busy_timeout(LOOP_BUSY_TIMEOUT).map_err(locked_err)?;
        let wal_frames = Arc::new(AtomicU32::new(0));
        // SAFETY: the handle is `conn`'s; the counter outlives the hook (`on_wal_commit`).
        unsafe {
            ffi::sqlite3_wal_hook(
                conn.handle(),
                Some(on_wal_commit),
                Arc::as_ptr(&wal_frames) as *mut std::ffi::c_void,
            );
        }
        let page_size: i64 = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .map_err(locked_err)?;
        let pages = (max_bytes / page_size.max(512) as u64).max(16);
        conn.query_row(&format!("PRAGMA max_page_count={pages}"), [], |_| Ok(()))
            .map_err(locked_err)?;
        let flush = match sync {
            SyncPolicy::Full => Some(wal_path(path)),
            SyncPolicy::Normal => None,
        };
        let mut s = Sqlite {
            conn,
            in_txn: false,
            flush,
            checkpointer: None,
            wal_frames,
            _lock: lock,
        };
        s.migrate()?;
        s.checkpointer = Some(SqliteCheckpoint::open(path)?);
        Ok(s)
    }

    fn version(&self) -> Result<Option<i64>, StoreError> {
        let has_meta: bool = self
            .conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type='table' AND name='meta'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .map_err(open_err)?
            > 0;
        if !has_meta {
            let tables: i64 = self
                .conn
                .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
                .map_err(open_err)?;
            if tables > 0 {
                return Err(StoreError::Schema(
                    "the file holds tables but no agent-hub schema version".into(),
                ));
            }
            return Ok(None);
        }
        let v: Option<String> = self
            .conn
            .query_row(
                "SELECT value FROM meta WHERE key='schema_version'",
                [],
                |r| r.get(0),
            )
            .optional()
            .map_err(open_err)?;
        let v = v.ok_or_else(|| StoreError::Schema("meta has no schema_version".into()))?;
        v.parse()
            .map(Some)
            .map_err(|_| StoreError::Schema(format!("schema_version {v:?} is not a number")))
    }

    /// Brings the schema to `SCHEMA_VERSION`, one step per version, each in a transaction.
    fn migrate(&mut self) -> Result<(), StoreError> {
        match self.version()? {
            None => {
                let tx = self.conn.transaction().map_err(open_err)?;
                tx.execute_batch("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);").map_err(open_err)?;
                tx.execute_batch(SCHEMA_V2).map_err(open_err)?;
                tx.execute_batch(SCHEMA_V3_TASKS).map_err(open_err)?;
                tx.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?1)", params![SCHEMA_VERSION.to_string()])
                    .map_err(open_err)?;
                tx.commit().map_err(open_err)?;
                Ok(())
            }
            Some(v) if v == SCHEMA_VERSION => Ok(()),
            Some(v) if v > SCHEMA_VERSION => Err(StoreError::Schema(format!(
                "the store has schema version {v}, newer than this binary's {SCHEMA_VERSION}; run a newer agent-hub-server"
            ))),
            Some(1) => {
                let tx = self.conn.transaction().map_err(open_err)?;
                let step = format!(
                    "ALTER TABLE envelopes RENAME TO envelopes_v1;{SCHEMA_V2}{MIGRATE_1_TO_2}"
                );
                tx.execute_batch(&step)
                    .map_err(|e| StoreError::Schema(format!("migrating schema 1 to 2: {e}")))?;
                tx.commit().map_err(open_err)?;
                self.migrate()
            }
            Some(2) => {
                let tx = self.conn.transaction().map_err(open_err)?;
                tx.execute_batch(&format!("{SCHEMA_V3_TASKS}{MIGRATE_2_TO_3}"))
                    .map_err(|e| StoreError::Schema(format!("migrating schema 2 to 3: {e}")))?;
                tx.commit().map_err(open_err)?;
                self.migrate()
            }
            Some(v) => Err(StoreError::Schema(format!("no migration from schema version {v} to {SCHEMA_VERSION}"))),
        }
    }

    fn apply_task(&self, op: &TaskStoreOp) -> rusqlite::Result<()> {
        match op {
            TaskStoreOp::Insert(t) => {
                let mut st = self.conn.prepare_cached(
                    "INSERT INTO tasks (seq, task, delegator, agent, peer, cwd, prompt, timeout_secs,
                         progress_secs, state, created_ms, started_ms, ended_ms, elapsed_ms,
                         stop_reason, reason, pid)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)",
                )?;
                st.execute(params![
                    t.seq as i64,
                    t.task,
                    t.delegator,
                    t.agent,
                    t.peer,
                    t.cwd,
                    t.prompt,
                    t.timeout_secs as i64,
                    t.progress_secs as i64,
                    t.state,
                    t.created_ms,
                    t.started_ms,
                    t.ended_ms,
                    t.elapsed_ms.map(|v| v as i64),
                    t.stop_reason,
                    t.reason,
                    t.pid
                ])?;
            }
            TaskStoreOp::State {
                task,
                state,
                started_ms,
                ..
            } => {
                let mut st = self.conn.prepare_cached(
                    "UPDATE tasks SET state = ?2, started_ms = coalesce(?3, started_ms) WHERE task = ?1",
                )?;
                st.execute(params![task, state, started_ms])?;
            }
            TaskStoreOp::Pid { task, pid } => {
                let mut st = self
                    .conn
                    .prepare_cached("UPDATE tasks SET pid = ?2 WHERE task = ?1")?;
                st.execute(params![task, pid])?;
            }
            TaskStoreOp::Settle {
                task,
                state,
                stop_reason,
                reason,
                ended_ms,
                elapsed_ms,
            } => {
                // The prompt is not kept once the task can never run again.
                let mut st = self.conn.prepare_cached(
                    "UPDATE tasks SET state = ?2, stop_reason = ?3, reason = ?4, ended_ms = ?5,
                         elapsed_ms = ?6, prompt = '' WHERE task = ?1",
                )?;
                st.execute(params![
                    task,
                    state,
                    stop_reason,
                    reason,
                    ended_ms,
                    *elapsed_ms as i64
                ])?;
            }
            TaskStoreOp::Forget { task } => {
                let mut st = self
                    .conn
                    .prepare_cached("DELETE FROM tasks WHERE task = ?1")?;
                st.execute(params![task])?;
            }
        }
        Ok(())
    }

    fn apply(&self, op: &StoreOp) -> rusqlite::Result<()> {
        match op {
            StoreOp::Insert {
                seq,
                agent,
                id,
                sender,
                kind,
                correlation_id,
                text,
                digest,
                accepted_ms,
            } => {
                let mut st = self.conn.prepare_cached(
                    "INSERT INTO envelopes (seq, sender, id, recipient, kind, correlation_id, text, digest, accepted_ms, state, state_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, 'queued', ?9)",
                )?;
                st.execute(params![
                    *seq as i64,
                    sender,
                    id,
                    agent,
                    kind,
                    correlation_id,
                    &**text,
                    &digest[..],
                    accepted_ms
                ])?;
            }
            StoreOp::Remove { seq } => {
                let mut st = self
                    .conn
                    .prepare_cached("UPDATE envelopes SET text = NULL WHERE seq = ?1")?;
                st.execute(params![*seq as i64])?;
            }
            StoreOp::Attempts { seq, attempts } => {
                let mut st = self
                    .conn
                    .prepare_cached("UPDATE envelopes SET attempts = ?2 WHERE seq = ?1")?;
                st.execute(params![*seq as i64, attempts])?;
            }
            StoreOp::State {
                seq,
                state,
                detail,
                at_ms,
                ..
            } => {
                let mut st = self.conn.prepare_cached(
                    "UPDATE envelopes SET state = ?2, detail = ?3, state_ms = ?4 WHERE seq = ?1",
                )?;
                st.execute(params![*seq as i64, state, detail, at_ms])?;
            }
            StoreOp::Forget { seq, .. } => {
                let mut st = self
                    .conn
                    .prepare_cached("DELETE FROM envelopes WHERE seq = ?1")?;
                st.execute(params![*seq as i64])?;
            }
            StoreOp::Task(op) => self.apply_task(op)?,
        }
        Ok(())
    }
}

impl Store for Sqlite {
    fn load(&mut self) -> Result<Loaded, StoreError> {
        let mut loaded = Loaded::default();
        let mut st = self.conn.prepare(rows::SELECT_ALL).map_err(open_err)?;
        let mut cursor = st.query([]).map_err(open_err)?;
        let mut previous = None;
        while let Some(r) = cursor.next().map_err(open_err)? {
            let (id, envelope) = rows::decode(r).map_err(StoreError::Corrupt)?;
            rows::check_order(previous, id.seq).map_err(StoreError::Corrupt)?;
            previous = Some(id.seq);
            loaded.envelopes.extend(envelope);
            loaded.ids.push(id);
        }
        rows::check_unique(&loaded.ids).map_err(StoreError::Corrupt)?;
        Ok(loaded)
    }

    fn load_tasks(&mut self) -> Result<Vec<StoredTask>, StoreError> {
        let mut st = self.conn.prepare(rows::SELECT_TASKS).map_err(open_err)?;
        let mut cursor = st.query([]).map_err(open_err)?;
        let mut tasks = Vec::new();
        while let Some(r) = cursor.next().map_err(open_err)? {
            tasks.push(rows::decode_task(r).map_err(StoreError::Corrupt)?);
        }
        Ok(tasks)
    }

    fn stage(&mut self, ops: &[StoreOp]) -> Result<(), StoreError> {
        if self.in_txn {
            self.rollback();
        }
        self.conn
            .prepare_cached("BEGIN IMMEDIATE")
            .and_then(|mut st| st.execute([]))
            .map_err(write_err)?;
        self.in_txn = true;
        for op in ops {
            if let Err(e) = self.apply(op) {
                self.rollback();
                return Err(write_err(e));
            }
        }
        Ok(())
    }

    fn commit(&mut self) -> Result<(), StoreError> {
        if !self.in_txn {
            return Ok(());
        }
        // Cached like the operations' statements: parsing BEGIN and COMMIT anew cost a
        // measurable share of a small commit.
        let done = self
            .conn
            .prepare_cached("COMMIT")
            .and_then(|mut st| st.execute([]));
        match done {
            Ok(_) => {
                self.in_txn = false;
                Ok(())
            }
            Err(e) => {
                self.rollback();
                Err(write_err(e))
            }
        }
    }

    fn rollback(&mut self) {
        if self.in_txn {
            let _ = self.conn.execute_batch("ROLLBACK");
            self.in_txn = false;
        }
    }

    fn is_durable(&self) -> bool {
        true
    }

    fn flush_path(&self) -> Option<PathBuf> {
        self.flush.clone()
    }

    fn wal_frames(&self) -> Option<u32> {
        Some(self.wal_frames.load(Ordering::Relaxed))
    }

    fn take_background(&mut self) -> Option<Background> {
        let checkpoint = self.checkpointer.take()?;
        Some(Background {
            flush: self
                .flush
                .clone()
                .map(|wal| Box::new(WalFlush::new(wal)) as Box<dyn super::flush::Flush>),
            checkpoint: Box::new(checkpoint),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoredId;

    fn tmp(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("agent-hub-store-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("queue.db")
    }

    /// `insert` with a text padded by `pad`, for tests that fill pages.
    fn padded(seq: u64, id: &str, pad: &str) -> StoreOp {
        let mut op = insert(seq, "b", id);
        if let StoreOp::Insert { text, .. } = &mut op {
            *text = Arc::from(format!(
                "{},\"pad\":\"{pad}\"}}",
                text.trim_end_matches('}')
            ));
        }
        op
    }

    fn insert(seq: u64, agent: &str, id: &str) -> StoreOp {
        StoreOp::Insert {
            seq,
            agent: agent.into(),
            id: id.into(),
            sender: "a".into(),
            kind: "task".into(),
            correlation_id: None,
            text: Arc::from(format!(
                "{{\"id\":\"{id}\",\"from\":\"a\",\"to\":\"{agent}\"}}"
            )),
            digest: [seq as u8; 32],
            accepted_ms: 1000 + seq as i64,
        }
    }

    #[test]
    fn a_removed_envelope_stays_remembered_until_forgotten() {
        let path = tmp("remember");
        {
            let mut s = Sqlite::open(&path, 1 << 30).unwrap();
            s.stage(&[insert(1, "b", "x"), insert(2, "b", "y")])
                .unwrap();
            s.commit().unwrap();
            s.stage(&[
                StoreOp::Remove { seq: 1 },
                StoreOp::State {
                    seq: 1,
                    sender: "a".into(),
                    id: "x".into(),
                    state: "delivered".into(),
                    detail: None,
                    at_ms: 5000,
                },
            ])
            .unwrap();
            s.commit().unwrap();
        }
        let mut s = Sqlite::open(&path, 1 << 30).unwrap();
        let loaded = s.load().unwrap();
        assert_eq!(loaded.envelopes.len(), 1);
        assert_eq!(loaded.envelopes[0].id, "y");
        let x = StoredId {
            seq: 1,
            sender: "a".into(),
            id: "x".into(),
            to: "b".into(),
            digest: [1; 32],
            accepted_ms: 1001,
            state: "delivered".into(),
            detail: None,
            state_ms: 5000,
        };
        assert_eq!(loaded.ids[0], x);
        assert_eq!(
            (loaded.ids[1].seq, loaded.ids[1].state.as_str()),
            (2, "queued")
        );
        s.stage(&[StoreOp::Forget {
            seq: 1,
            sender: "a".into(),
            id: "x".into(),
        }])
        .unwrap();
        s.commit().unwrap();
        let ids: Vec<u64> = s.load().unwrap().ids.iter().map(|i| i.seq).collect();
        assert_eq!(ids, [2]);
    }

    /// A store written by the first release (schema 1: envelopes plus a `remembered` table keyed
    /// by sender and id) opens as schema 2 with the same queues and the same remembered ids.
    #[test]
    fn schema_1_is_migrated_to_2_keeping_queues_and_remembered_ids() {
        let path = tmp("migrate");
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch(
                "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                 INSERT INTO meta VALUES ('schema_version', '1');
                 CREATE TABLE envelopes (seq INTEGER PRIMARY KEY, agent TEXT NOT NULL,
                     id TEXT NOT NULL, sender TEXT NOT NULL, kind TEXT NOT NULL,
                     correlation_id TEXT, text TEXT NOT NULL,
                     attempts INTEGER NOT NULL DEFAULT 0);
                 CREATE TABLE remembered (sender TEXT NOT NULL, id TEXT NOT NULL,
                     recipient TEXT NOT NULL, digest BLOB NOT NULL,
                     accepted_ms INTEGER NOT NULL, state TEXT NOT NULL, detail TEXT,
                     state_ms INTEGER NOT NULL, PRIMARY KEY (sender, id));
                 INSERT INTO envelopes VALUES (4, 'b', 'q1', 'a', 'task', 'c9', '{\"id\":\"q1\",\"from\":\"a\",\"to\":\"b\"}', 2);
                 INSERT INTO envelopes VALUES (7, 'b', 'q2', 'a', 'task', NULL, '{\"id\":\"q2\",\"from\":\"a\",\"to\":\"b\"}', 0);
                 INSERT INTO remembered VALUES ('a', 'q1', 'b', zeroblob(32), 100, 'delivered', NULL, 150);
                 INSERT INTO remembered VALUES ('a', 'q2', 'b', zeroblob(32), 110, 'queued', NULL, 110);
                 INSERT INTO remembered VALUES ('a', 'gone', 'b', zeroblob(32), 90, 'acked', NULL, 95);",
            )
            .unwrap();
        }
        let mut s = Sqlite::open(&path, 1 << 30).unwrap();
        assert_eq!(s.version().unwrap(), Some(SCHEMA_VERSION));
        let loaded = s.load().unwrap();
        let queued: Vec<(u64, &str, Option<&str>, &str, u32)> = loaded
            .envelopes
            .iter()
            .map(|e| {
                (
                    e.seq,
                    e.id.as_str(),
                    e.correlation_id.as_deref(),
                    e.text.as_str(),
                    e.attempts,
                )
            })
            .collect();
        assert_eq!(
            queued,
            [
                (
                    4,
                    "q1",
                    Some("c9"),
                    "{\"id\":\"q1\",\"from\":\"a\",\"to\":\"b\"}",
                    2
                ),
                (
                    7,
                    "q2",
                    None,
                    "{\"id\":\"q2\",\"from\":\"a\",\"to\":\"b\"}",
                    0
                )
            ]
        );
        let ids: Vec<(&str, &str, i64)> = loaded
            .ids
            .iter()
            .map(|i| (i.id.as_str(), i.state.as_str(), i.accepted_ms))
            .collect();
        assert_eq!(
            ids,
            [
                ("q1", "delivered", 100),
                ("q2", "queued", 110),
                ("gone", "acked", 90)
            ]
        );
        assert!(
            loaded.ids[2].seq > 7,
            "a remembered-only id is keyed after the queues"
        );
        // And the migrated store takes new writes.
        s.stage(&[insert(20, "b", "new")]).unwrap();
        s.commit().unwrap();
        assert_eq!(s.load().unwrap().envelopes.len(), 3);
    }

    #[test]
    fn committed_ops_survive_reopen_and_rolled_back_ones_do_not() {
        let path = tmp("reopen");
        {
            let mut s = Sqlite::open(&path, 1 << 30).unwrap();
            s.stage(&[
                insert(1, "b", "x"),
                insert(2, "b", "y"),
                insert(3, "c", "z"),
            ])
            .unwrap();
            s.commit().unwrap();
            s.stage(&[
                StoreOp::Remove { seq: 2 },
                StoreOp::Attempts {
                    seq: 1,
                    attempts: 2,
                },
            ])
            .unwrap();
            s.commit().unwrap();
            s.stage(&[StoreOp::Remove { seq: 1 }]).unwrap();
            s.rollback();
        }
        let mut s = Sqlite::open(&path, 1 << 30).unwrap();
        let loaded = s.load().unwrap();
        let ids: Vec<(&str, u32)> = loaded
            .envelopes
            .iter()
            .map(|e| (e.id.as_str(), e.attempts))
            .collect();
        assert_eq!(ids, [("x", 2), ("z", 0)]);
    }

    #[test]
    fn the_sync_policy_picks_the_flush_and_sqlite_only_writes() {
        for policy in [SyncPolicy::Full, SyncPolicy::Normal] {
            let path = tmp(&format!("sync{policy:?}"));
            let mut s = Sqlite::open_with(&path, 1 << 30, policy).unwrap();
            let got: i64 = s
                .conn
                .query_row("PRAGMA synchronous", [], |r| r.get(0))
                .unwrap();
            assert_eq!(
                got, 1,
                "{policy:?}: NORMAL; the flush thread does the fsync"
            );
            let want = match policy {
                SyncPolicy::Full => Some(wal_path(&path)),
                SyncPolicy::Normal => None,
            };
            assert_eq!(s.flush_path(), want);
            // The path named is the file SQLite writes its commits to.
            s.stage(&[insert(1, "b", "x")]).unwrap();
            s.commit().unwrap();
            assert!(wal_path(&path).metadata().unwrap().len() > 0);
        }
    }

    #[test]
    fn the_loop_connection_never_checkpoints_and_a_full_checkpoint_lets_the_wal_start_over() {
        let path = tmp("ckpt");
        let mut s = Sqlite::open_with(&path, 1 << 30, SyncPolicy::Normal).unwrap();
        let auto: i64 = s
            .conn
            .query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))
            .unwrap();
        assert_eq!(auto, 0);
        let mut ckpt = s.take_background().expect("sqlite has background work");
        assert!(ckpt.flush.is_none(), "sync = normal flushes nothing");
        assert!(s.take_background().is_none(), "handed over once");
        let mut last = 0;
        for seq in 1..=200 {
            s.stage(&[insert(seq, "b", &format!("e{seq}"))]).unwrap();
            s.commit().unwrap();
            let frames = s.wal_frames().unwrap();
            assert!(
                frames > last,
                "commit {seq}: the WAL grows ({frames} after {last})"
            );
            last = frames;
        }
        // Nothing was checkpointed by the commits: the database file holds the schema only.
        let done = ckpt.checkpoint.checkpoint().unwrap();
        assert_eq!(
            (done.wal_frames, done.copied, done.busy),
            (last, last, false),
            "no writer was active: every frame copied"
        );
        s.stage(&[insert(201, "b", "after")]).unwrap();
        s.commit().unwrap();
        assert!(
            s.wal_frames().unwrap() < 10,
            "the next commit starts the WAL over: {}",
            s.wal_frames().unwrap()
        );
        assert_eq!(s.load().unwrap().envelopes.len(), 201);
    }

    /// Checkpoints on the flush thread's connection run while the loop's connection commits:
    /// nothing is lost, nothing deadlocks, and the file stays sound.
    #[test]
    fn checkpoints_alongside_commits_lose_nothing() {
        use std::sync::atomic::AtomicBool;
        let path = tmp("concurrent");
        let mut s = Sqlite::open(&path, 1 << 30).unwrap();
        let mut bg = s.take_background().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopper = stop.clone();
        let runner = std::thread::spawn(move || {
            let mut runs = 0u32;
            while !stopper.load(Ordering::SeqCst) {
                if let Err(e) = bg.checkpoint.checkpoint() {
                    panic!("checkpoint failed: {e}");
                }
                runs += 1;
            }
            runs
        });
        let big = "x".repeat(3000);
        for seq in 1..=1500u64 {
            let mut ops = vec![padded(seq, &format!("e{seq}"), &big)];
            if seq % 3 == 0 {
                ops.push(StoreOp::Remove { seq: seq - 1 });
            }
            s.stage(&ops).unwrap();
            s.commit().unwrap();
        }
        stop.store(true, Ordering::SeqCst);
        let runs = runner.join().unwrap();
        assert!(runs > 0);
        drop(s);
        let mut s = Sqlite::open(&path, 1 << 30).unwrap();
        let ok: String = s
            .conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(ok, "ok");
        let loaded = s.load().unwrap();
        assert_eq!(loaded.ids.len(), 1500);
        assert_eq!(loaded.envelopes.len(), 1000);
    }

    /// The whole mechanism on a real WAL, at small thresholds: a loop that commits as fast as
    /// it can and honours `holds_commits` as the server does (`Server::commit_can_wait`)
    /// keeps the WAL bounded, and checkpoints really copy it back.
    #[test]
    fn under_steady_commits_the_flush_thread_keeps_the_wal_bounded() {
        use crate::store::flush::Flusher;
        let path = tmp("bounded");
        let mut s = Sqlite::open_with(&path, 1 << 30, SyncPolicy::Full).unwrap();
        let woken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let w = woken.clone();
        let mut f = Flusher::spawn_background(
            s.take_background().unwrap(),
            Arc::new(move || {
                w.fetch_add(1, Ordering::SeqCst);
            }),
        )
        .unwrap();
        let (ask, hold) = (64, 256);
        f.set_checkpoint_pages(ask, hold);
        let pad = "p".repeat(6000);
        let (mut seq, mut max_frames, mut held) = (0u64, 0u32, 0u32);
        while seq < 3000 {
            while f.completed().is_some() {}
            if f.holds_commits() {
                held += 1;
                std::thread::yield_now();
                continue;
            }
            seq += 1;
            let mut ops = vec![padded(seq, &format!("e{seq}"), &pad)];
            if seq > 1 {
                ops.push(StoreOp::Remove { seq: seq - 1 });
            }
            s.stage(&ops).unwrap();
            s.commit().unwrap();
            let frames = s.wal_frames().unwrap();
            max_frames = max_frames.max(frames);
            f.wal_committed(frames);
        }
        assert!(f.checkpoints_done() > 0, "checkpoints ran");
        // One commit here writes about 4 pages; the hold stops the growth within a few
        // commits of the bound.
        assert!(
            max_frames < hold + 64,
            "the WAL stayed near its bound: {max_frames} frames at most (hold {hold}), {held} holds"
        );
        assert!(woken.load(Ordering::SeqCst) > 0);
        drop(f);
        drop(s);
        let loaded = Sqlite::open(&path, 1 << 30).unwrap().load().unwrap();
        assert_eq!((loaded.ids.len(), loaded.envelopes.len()), (3000, 1));
    }

    #[test]
    fn the_store_file_is_private() {
        let path = tmp("mode");
        drop(Sqlite::open(&path, 1 << 30).unwrap());
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn a_second_opener_is_refused_while_the_first_holds_the_lock() {
        let path = tmp("lock");
        let _first = Sqlite::open(&path, 1 << 30).unwrap();
        match Sqlite::open(&path, 1 << 30) {
            Err(StoreError::Open(m)) => {
                assert!(
                    m.contains("is another agent-hub-server using this store?"),
                    "{m}"
                )
            }
            other => panic!("expected an open error, got {:?}", other.err()),
        }
    }

    #[test]
    fn a_newer_schema_is_refused() {
        let path = tmp("newer");
        drop(Sqlite::open(&path, 1 << 30).unwrap());
        let c = Connection::open(&path).unwrap();
        c.execute(
            "UPDATE meta SET value = '99' WHERE key = 'schema_version'",
            [],
        )
        .unwrap();
        drop(c);
        match Sqlite::open(&path, 1 << 30) {
            Err(StoreError::Schema(m)) => assert!(m.contains("newer than this binary"), "{m}"),
            other => panic!("expected a schema error, got {:?}", other.err()),
        }
    }

    #[test]
    fn a_foreign_database_is_refused() {
        let path = tmp("foreign");
        let c = Connection::open(&path).unwrap();
        c.execute_batch("CREATE TABLE t (x INTEGER);").unwrap();
        drop(c);
        assert!(matches!(
            Sqlite::open(&path, 1 << 30),
            Err(StoreError::Schema(_))
        ));
    }

    #[test]
    fn a_full_store_fails_the_whole_batch_and_recovers_after_deletes() {
        let path = tmp("full");
        let mut s = Sqlite::open(&path, 64 * 1024).unwrap();
        let big = "x".repeat(4000);
        let mut seq = 0;
        let mut full = false;
        for _ in 0..200 {
            seq += 1;
            let op = padded(seq, &format!("i{seq}"), &big);
            match s.stage(&[op]).and_then(|()| s.commit()) {
                Ok(()) => {}
                Err(StoreError::Write(m)) => {
                    assert!(m.to_lowercase().contains("full"), "{m}");
                    full = true;
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(full, "the size cap was never reached");
        let before = s.load().unwrap().envelopes.len();
        assert_eq!(
            before as u64,
            seq - 1,
            "the failed insert left nothing behind"
        );
        let removes: Vec<StoreOp> = (1..seq).map(|q| StoreOp::Remove { seq: q }).collect();
        s.stage(&removes).unwrap();
        s.commit().unwrap();
        s.stage(&[insert(seq, "b", "again")]).unwrap();
        s.commit().unwrap();
        assert_eq!(s.load().unwrap().envelopes.len(), 1);
    }

    fn task_id(hex: char) -> String {
        format!("task-{}", hex.to_string().repeat(32))
    }

    fn task(seq: u64, hex: char) -> StoreOp {
        StoreOp::Task(TaskStoreOp::Insert(StoredTask {
            seq,
            task: task_id(hex),
            delegator: "a".into(),
            agent: "codex".into(),
            peer: None,
            cwd: "/w".into(),
            prompt: "PROMPT".into(),
            timeout_secs: 60,
            progress_secs: 0,
            state: "queued".into(),
            created_ms: 2000 + seq as i64,
            ..StoredTask::default()
        }))
    }

    /// Task rows come back in acceptance order whatever order their ids sort in, with every
    /// later change applied; a settle clears the prompt; a rolled-back batch keeps nothing;
    /// `Forget` removes the row.
    #[test]
    fn task_rows_apply_load_in_order_and_are_forgotten() {
        let path = tmp("tasks");
        {
            let mut s = Sqlite::open(&path, 1 << 30).unwrap();
            s.stage(&[task(1, 'f'), task(2, 'a')]).unwrap();
            s.commit().unwrap();
            s.stage(&[
                StoreOp::Task(TaskStoreOp::State {
                    task: task_id('f'),
                    state: "running".into(),
                    started_ms: Some(3000),
                    at_ms: 3000,
                }),
                StoreOp::Task(TaskStoreOp::Pid {
                    task: task_id('f'),
                    pid: 4242,
                }),
                StoreOp::Task(TaskStoreOp::Settle {
                    task: task_id('f'),
                    state: "completed".into(),
                    stop_reason: Some("end_turn".into()),
                    reason: None,
                    ended_ms: 4000,
                    elapsed_ms: 1000,
                }),
            ])
            .unwrap();
            s.commit().unwrap();
            s.stage(&[task(3, 'b')]).unwrap();
            s.rollback();
        }
        let mut s = Sqlite::open(&path, 1 << 30).unwrap();
        let tasks = s.load_tasks().unwrap();
        assert_eq!(tasks.len(), 2);
        let f = &tasks[0];
        assert_eq!((f.seq, f.task.as_str()), (1, task_id('f').as_str()));
        assert_eq!(f.state, "completed");
        assert_eq!(f.started_ms, Some(3000));
        assert_eq!(f.ended_ms, Some(4000));
        assert_eq!(f.elapsed_ms, Some(1000));
        assert_eq!(f.pid, Some(4242));
        assert_eq!(f.stop_reason.as_deref(), Some("end_turn"));
        assert_eq!(f.prompt, "", "a settled task keeps no prompt");
        assert_eq!(tasks[1].prompt, "PROMPT");
        assert_eq!(tasks[1].state, "queued");
        s.stage(&[StoreOp::Task(TaskStoreOp::Forget { task: task_id('f') })])
            .unwrap();
        s.commit().unwrap();
        let left: Vec<u64> = s.load_tasks().unwrap().iter().map(|t| t.seq).collect();
        assert_eq!(left, [2]);
    }

    /// A schema 2 store (the release before delegated tasks) opens as schema 3 with its
    /// envelopes untouched and an empty task table.
    #[test]
    fn schema_2_is_migrated_to_3_keeping_envelopes() {
        let path = tmp("migrate23");
        {
            let c = Connection::open(&path).unwrap();
            c.execute_batch(&format!(
                "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                 INSERT INTO meta VALUES ('schema_version', '2');{SCHEMA_V2}
                 INSERT INTO envelopes VALUES (5, 'a', 'q1', 'b', 'task', NULL,
                     '{{\"id\":\"q1\",\"from\":\"a\",\"to\":\"b\"}}', 1, zeroblob(32), 100,
                     'queued', NULL, 100);"
            ))
            .unwrap();
        }
        let mut s = Sqlite::open(&path, 1 << 30).unwrap();
        assert_eq!(s.version().unwrap(), Some(3));
        let loaded = s.load().unwrap();
        assert_eq!(loaded.envelopes.len(), 1);
        assert_eq!(loaded.envelopes[0].attempts, 1);
        assert!(s.load_tasks().unwrap().is_empty());
        s.stage(&[task(1, 'c')]).unwrap();
        s.commit().unwrap();
        assert_eq!(s.load_tasks().unwrap().len(), 1);
    }
}
