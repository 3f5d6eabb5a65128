//! The SQLite queue store: one database file, WAL journal, `synchronous=FULL`, an exclusive
//! lock so two hubs can never share it, and a versioned schema (docs/operations.md, "Queue
//! store schema and migrations").
//!
//! Owns the SQL. Refuses: deciding what to store.

use super::{Loaded, Store, StoreError, StoreOp, StoredEnvelope, StoredId};
use crate::config::SyncPolicy;
use rusqlite::{params, Connection, OptionalExtension};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The schema this binary writes. Bump it with a migration step in `migrate` and a line in
/// docs/operations.md.
pub const SCHEMA_VERSION: i64 = 1;

pub struct Sqlite {
    conn: Connection,
    in_txn: bool,
}

const SCHEMA_V1: &str = "
CREATE TABLE envelopes (
    seq            INTEGER PRIMARY KEY,
    agent          TEXT NOT NULL,
    id             TEXT NOT NULL,
    sender         TEXT NOT NULL,
    kind           TEXT NOT NULL,
    correlation_id TEXT,
    text           TEXT NOT NULL,
    attempts       INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE remembered (
    sender      TEXT NOT NULL,
    id          TEXT NOT NULL,
    recipient   TEXT NOT NULL,
    digest      BLOB NOT NULL,
    accepted_ms INTEGER NOT NULL,
    state       TEXT NOT NULL,
    detail      TEXT,
    state_ms    INTEGER NOT NULL,
    PRIMARY KEY (sender, id)
);
";

fn open_err(e: rusqlite::Error) -> StoreError {
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

fn write_err(e: rusqlite::Error) -> StoreError {
    StoreError::Write(e.to_string())
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
        let conn = Connection::open(path).map_err(locked_err)?;
        conn.pragma_update(None, "locking_mode", "EXCLUSIVE")
            .map_err(locked_err)?;
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(locked_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::Open(format!(
                "journal_mode WAL not available (got {mode})"
            )));
        }
        let level = match sync {
            SyncPolicy::Full => "FULL",
            SyncPolicy::Normal => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", level)
            .map_err(locked_err)?;
        let page_size: i64 = conn
            .query_row("PRAGMA page_size", [], |r| r.get(0))
            .map_err(locked_err)?;
        let pages = (max_bytes / page_size.max(512) as u64).max(16);
        conn.query_row(&format!("PRAGMA max_page_count={pages}"), [], |_| Ok(()))
            .map_err(locked_err)?;
        // Takes the exclusive lock now, so a second hub on the same file fails at startup.
        conn.execute_batch("BEGIN EXCLUSIVE; COMMIT;")
            .map_err(locked_err)?;
        let mut s = Sqlite {
            conn,
            in_txn: false,
        };
        s.migrate()?;
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
                tx.execute_batch(SCHEMA_V1).map_err(open_err)?;
                tx.execute("INSERT INTO meta (key, value) VALUES ('schema_version', ?1)", params![SCHEMA_VERSION.to_string()])
                    .map_err(open_err)?;
                tx.commit().map_err(open_err)?;
                Ok(())
            }
            Some(v) if v == SCHEMA_VERSION => Ok(()),
            Some(v) if v > SCHEMA_VERSION => Err(StoreError::Schema(format!(
                "the store has schema version {v}, newer than this binary's {SCHEMA_VERSION}; run a newer agent-hub-server"
            ))),
            // Future: `Some(1) => { migrate_1_to_2(); self.migrate() }`.
            Some(v) => Err(StoreError::Schema(format!("no migration from schema version {v} to {SCHEMA_VERSION}"))),
        }
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
            } => {
                let mut st = self.conn.prepare_cached(
                    "INSERT INTO envelopes (seq, agent, id, sender, kind, correlation_id, text) VALUES (?1,?2,?3,?4,?5,?6,?7)",
                )?;
                st.execute(params![
                    *seq as i64,
                    agent,
                    id,
                    sender,
                    kind,
                    correlation_id,
                    &**text
                ])?;
            }
            StoreOp::Remove { seq } => {
                let mut st = self
                    .conn
                    .prepare_cached("DELETE FROM envelopes WHERE seq = ?1")?;
                st.execute(params![*seq as i64])?;
            }
            StoreOp::Attempts { seq, attempts } => {
                let mut st = self
                    .conn
                    .prepare_cached("UPDATE envelopes SET attempts = ?2 WHERE seq = ?1")?;
                st.execute(params![*seq as i64, attempts])?;
            }
            StoreOp::Remember {
                sender,
                id,
                to,
                digest,
                accepted_ms,
            } => {
                let mut st = self.conn.prepare_cached(
                    "INSERT OR REPLACE INTO remembered (sender, id, recipient, digest, accepted_ms, state, detail, state_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, 'queued', NULL, ?5)",
                )?;
                st.execute(params![sender, id, to, &digest[..], accepted_ms])?;
            }
            StoreOp::State {
                sender,
                id,
                state,
                detail,
                at_ms,
            } => {
                let mut st = self
                    .conn
                    .prepare_cached("UPDATE remembered SET state = ?3, detail = ?4, state_ms = ?5 WHERE sender = ?1 AND id = ?2")?;
                st.execute(params![sender, id, state, detail, at_ms])?;
            }
            StoreOp::Forget { sender, id } => {
                let mut st = self
                    .conn
                    .prepare_cached("DELETE FROM remembered WHERE sender = ?1 AND id = ?2")?;
                st.execute(params![sender, id])?;
            }
        }
        Ok(())
    }
}

impl Store for Sqlite {
    fn load(&mut self) -> Result<Loaded, StoreError> {
        let mut loaded = Loaded::default();
        let mut st = self
            .conn
            .prepare("SELECT seq, agent, id, sender, kind, correlation_id, text, attempts FROM envelopes ORDER BY seq")
            .map_err(open_err)?;
        let rows = st
            .query_map([], |r| {
                Ok(StoredEnvelope {
                    seq: r.get::<_, i64>(0)? as u64,
                    agent: r.get(1)?,
                    id: r.get(2)?,
                    sender: r.get(3)?,
                    kind: r.get(4)?,
                    correlation_id: r.get(5)?,
                    text: r.get(6)?,
                    attempts: r.get(7)?,
                })
            })
            .map_err(open_err)?;
        for row in rows {
            loaded.envelopes.push(row.map_err(open_err)?);
        }
        let mut st = self
            .conn
            .prepare("SELECT sender, id, recipient, digest, accepted_ms, state, detail, state_ms FROM remembered ORDER BY accepted_ms")
            .map_err(open_err)?;
        let rows = st
            .query_map([], |r| {
                let blob: Vec<u8> = r.get(3)?;
                let mut digest = [0u8; 32];
                if blob.len() == 32 {
                    digest.copy_from_slice(&blob);
                }
                Ok(StoredId {
                    sender: r.get(0)?,
                    id: r.get(1)?,
                    to: r.get(2)?,
                    digest,
                    accepted_ms: r.get(4)?,
                    state: r.get(5)?,
                    detail: r.get(6)?,
                    state_ms: r.get(7)?,
                })
            })
            .map_err(open_err)?;
        for row in rows {
            loaded.ids.push(row.map_err(open_err)?);
        }
        Ok(loaded)
    }

    fn stage(&mut self, ops: &[StoreOp]) -> Result<(), StoreError> {
        if self.in_txn {
            self.rollback();
        }
        self.conn
            .execute_batch("BEGIN IMMEDIATE")
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
        match self.conn.execute_batch("COMMIT") {
            Ok(()) => {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn tmp(name: &str) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("agent-hub-store-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir.join("queue.db")
    }

    fn insert(seq: u64, agent: &str, id: &str) -> StoreOp {
        StoreOp::Insert {
            seq,
            agent: agent.into(),
            id: id.into(),
            sender: "a".into(),
            kind: "task".into(),
            correlation_id: None,
            text: Arc::from(format!("{{\"id\":\"{id}\"}}")),
        }
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
    fn the_sync_policy_reaches_sqlite() {
        for (policy, level) in [(SyncPolicy::Full, 2), (SyncPolicy::Normal, 1)] {
            let path = tmp(&format!("sync{level}"));
            let s = Sqlite::open_with(&path, 1 << 30, policy).unwrap();
            let got: i64 = s
                .conn
                .query_row("PRAGMA synchronous", [], |r| r.get(0))
                .unwrap();
            assert_eq!(got, level, "{policy:?}");
        }
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
            let op = StoreOp::Insert {
                seq,
                agent: "b".into(),
                id: format!("i{seq}"),
                sender: "a".into(),
                kind: "k".into(),
                correlation_id: None,
                text: Arc::from(big.as_str()),
            };
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
}
