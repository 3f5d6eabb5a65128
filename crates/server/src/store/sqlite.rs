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
use super::sqlite_wal::{lock_store, on_wal_commit, SqliteCheckpoint, StoreLock};
use super::{
    open_err, rows, Loaded, RowSink, Store, StoreError, StoreOp, StoredRequest, StoredTask,
    TaskStoreOp,
};
use agent_hub_host::config::SyncPolicy;
use rusqlite::{ffi, params, Connection, OptionalExtension};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

/// The schema this binary writes. Bump it with a migration step in `migrate` and a line in
/// docs/operations.md.
pub const SCHEMA_VERSION: i64 = 6;

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
    /// The store's lock: one hub per store (`lock_store`).
    _lock: StoreLock,
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

/// Version 3 to 4: receipts (SPEC §12.4 "Readers"): the kind of reader an envelope was handed
/// to, beside its state. Rows written before hold NULL: status shows no reader for them.
const MIGRATE_3_TO_4: &str = "
ALTER TABLE envelopes ADD COLUMN reader TEXT;
UPDATE meta SET value = '4' WHERE key = 'schema_version';
";

/// The column version 4 adds, for a new file (created at version 2's shape, then this).
const SCHEMA_V4_READER: &str = "ALTER TABLE envelopes ADD COLUMN reader TEXT;";

/// Version 5 (issue 37, approvals): a task keeps the policy its delegator asked for and its
/// pre-approval rules (a queued task starts after a restart as it was delegated), and the
/// requests held open are kept one row each, so a restart closes each by the fallback
/// (`hub restarted`) and tells its delegator, instead of forgetting it. Rows written before
/// hold NULL: the task runs under the operator's bound, with no rules.
const SCHEMA_V5_APPROVALS: &str = "
ALTER TABLE tasks ADD COLUMN permission TEXT;
ALTER TABLE tasks ADD COLUMN allow TEXT;
CREATE TABLE requests (
    request    TEXT PRIMARY KEY,
    task       TEXT NOT NULL,
    seq        INTEGER NOT NULL,
    type       TEXT NOT NULL,
    tool_kind  TEXT,
    opened_ms  INTEGER NOT NULL,
    expires_ms INTEGER NOT NULL
);
";

/// Version 4 to 5: the approvals' columns and table; nothing else changes.
const MIGRATE_4_TO_5: &str = "UPDATE meta SET value = '5' WHERE key = 'schema_version';";

/// Version 6 (issue 38, docs/design/tasks.md §8): a task's session (its id and what the agent
/// can do with it, for a resume after a restart), its turn and restart counts, how long its
/// session is kept, its usage figures (`meter`, JSON of `tasks::meter::Meter`), its budget
/// (JSON of `tasks::meter::Budget`) and where it was placed; and one row per turn. Rows written
/// before hold NULL and 0: no session, no figures, no budget.
const SCHEMA_V6_TASKS: &str = "
ALTER TABLE tasks ADD COLUMN session_id    TEXT;
ALTER TABLE tasks ADD COLUMN session_caps  TEXT;
ALTER TABLE tasks ADD COLUMN turn          INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN restarts      INTEGER NOT NULL DEFAULT 0;
ALTER TABLE tasks ADD COLUMN kept_until_ms INTEGER;
ALTER TABLE tasks ADD COLUMN meter         TEXT;
ALTER TABLE tasks ADD COLUMN budget        TEXT;
ALTER TABLE tasks ADD COLUMN placement     TEXT;
CREATE TABLE turns (
    task        TEXT NOT NULL,
    turn        INTEGER NOT NULL,
    state       TEXT NOT NULL,
    stop_reason TEXT,
    reason      TEXT,
    how         TEXT NOT NULL,
    started_ms  INTEGER NOT NULL,
    ended_ms    INTEGER,
    elapsed_ms  INTEGER,
    meter       TEXT,
    PRIMARY KEY (task, turn)
);
";

/// Version 5 to 6: the columns and table above; nothing else changes.
const MIGRATE_5_TO_6: &str = "UPDATE meta SET value = '6' WHERE key = 'schema_version';";

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
                tx.execute_batch(SCHEMA_V4_READER).map_err(open_err)?;
                tx.execute_batch(SCHEMA_V5_APPROVALS).map_err(open_err)?;
                tx.execute_batch(SCHEMA_V6_TASKS).map_err(open_err)?;
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
            Some(3) => {
                let tx = self.conn.transaction().map_err(open_err)?;
                tx.execute_batch(MIGRATE_3_TO_4)
                    .map_err(|e| StoreError::Schema(format!("migrating schema 3 to 4: {e}")))?;
                tx.commit().map_err(open_err)?;
                self.migrate()
            }
            Some(4) => {
                let tx = self.conn.transaction().map_err(open_err)?;
                tx.execute_batch(&format!("{SCHEMA_V5_APPROVALS}{MIGRATE_4_TO_5}"))
                    .map_err(|e| StoreError::Schema(format!("migrating schema 4 to 5: {e}")))?;
                tx.commit().map_err(open_err)?;
                self.migrate()
            }
            Some(5) => {
                let tx = self.conn.transaction().map_err(open_err)?;
                tx.execute_batch(&format!("{SCHEMA_V6_TASKS}{MIGRATE_5_TO_6}"))
                    .map_err(|e| StoreError::Schema(format!("migrating schema 5 to 6: {e}")))?;
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
                         stop_reason, reason, pid, permission, allow, session_id, session_caps,
                         turn, restarts, kept_until_ms, meter, budget, placement)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17,
                         ?18, ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26, ?27)",
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
                    t.pid,
                    t.permission,
                    t.allow,
                    t.session_id,
                    t.session_caps,
                    t.turn,
                    t.restarts,
                    t.kept_until_ms,
                    t.meter,
                    t.budget,
                    t.placement
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
                meter,
                budget,
            } => {
                // The prompt is not kept once the task can never run again. The figures
                // and the budget as it ended (issue 38 design §8).
                let mut st = self.conn.prepare_cached(
                    "UPDATE tasks SET state = ?2, stop_reason = ?3, reason = ?4, ended_ms = ?5,
                         elapsed_ms = ?6, prompt = '', meter = ?7, budget = coalesce(?8, budget)
                     WHERE task = ?1",
                )?;
                st.execute(params![
                    task,
                    state,
                    stop_reason,
                    reason,
                    ended_ms,
                    *elapsed_ms as i64,
                    meter,
                    budget
                ])?;
            }
            TaskStoreOp::Forget { task } => {
                let mut st = self
                    .conn
                    .prepare_cached("DELETE FROM tasks WHERE task = ?1")?;
                st.execute(params![task])?;
                // A forgotten task has no open request (they close when it ends); a row left
                // by an older build goes with it.
                let mut st = self
                    .conn
                    .prepare_cached("DELETE FROM requests WHERE task = ?1")?;
                st.execute(params![task])?;
                // Its turns (schema 6) go with it.
                let mut st = self
                    .conn
                    .prepare_cached("DELETE FROM turns WHERE task = ?1")?;
                st.execute(params![task])?;
            }
            TaskStoreOp::OpenRequest(r) => {
                let mut st = self.conn.prepare_cached(
                    "INSERT OR REPLACE INTO requests (request, task, seq, type, tool_kind, opened_ms, expires_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )?;
                st.execute(params![
                    r.request,
                    r.task,
                    r.seq,
                    r.kind,
                    r.tool_kind,
                    r.opened_ms,
                    r.expires_ms
                ])?;
            }
            TaskStoreOp::CloseRequest { request } => {
                let mut st = self
                    .conn
                    .prepare_cached("DELETE FROM requests WHERE request = ?1")?;
                st.execute(params![request])?;
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
                reader,
                at_ms,
                ..
            } => {
                let mut st = self.conn.prepare_cached(
                    "UPDATE envelopes SET state = ?2, detail = ?3, state_ms = ?4, reader = ?5 WHERE seq = ?1",
                )?;
                let reader = reader.map(agent_hub_proto::wire::Reader::as_str);
                st.execute(params![*seq as i64, state, detail, at_ms, reader])?;
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
        self.load_rows(&mut loaded)?;
        rows::check_unique(&loaded.ids).map_err(StoreError::Corrupt)?;
        Ok(loaded)
    }

    fn load_rows(&mut self, sink: &mut dyn RowSink) -> Result<(), StoreError> {
        super::load::load_rows(&mut self.conn, sink)
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

    fn load_requests(&mut self) -> Result<Vec<StoredRequest>, StoreError> {
        let mut st = self.conn.prepare(rows::SELECT_REQUESTS).map_err(open_err)?;
        let mut cursor = st.query([]).map_err(open_err)?;
        let mut requests = Vec::new();
        while let Some(r) = cursor.next().map_err(open_err)? {
            requests.push(rows::decode_request(r).map_err(StoreError::Corrupt)?);
        }
        Ok(requests)
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
mod tests;
