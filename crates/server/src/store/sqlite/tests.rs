//! Tests of the SQLite queue store (`sqlite`): what is committed survives a reopen and what is
//! rolled back does not, remembered ids, schema migrations (1→2→3), the delegated tasks'
//! table, the lock, file modes, the WAL and its checkpoints (docs/operations.md "Queue store
//! schema and migrations").

use super::*;
use crate::store::StoredId;

fn tmp(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("agent-hub-store-{}-{name}", std::process::id()));
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
                reader: Some(agent_hub_proto::wire::Reader::StopHook),
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
        reader: Some(agent_hub_proto::wire::Reader::StopHook),
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
                &*e.text,
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
/// it can and honours `holds_commits` as the server does (`event_loop::commit_io::Commits::holds_commits`)
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

/// The lock is the process's, not the open file's: a child forked to start an agent and not
/// yet at its `exec` must not keep the store locked once the hub is gone. Here the "hub" drops
/// its store while such a child waits (in its pre-exec step) and opens it again: granted.
/// With `flock` the child's copy of the descriptor kept the lock and this open was refused.
#[test]
fn a_child_between_fork_and_exec_does_not_hold_the_lock() {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::process::CommandExt;
    let path = tmp("fork");
    let first = Sqlite::open(&path, 1 << 30).unwrap();
    let pipe = || {
        let mut fds = [0; 2];
        // SAFETY: pipe2 writes two descriptors into the array it is given.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: both descriptors were just opened and are owned here only.
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) }
    };
    let (forked_r, forked_w) = pipe();
    let (go_r, go_w) = pipe();
    let (fw, gr) = (forked_w.as_raw_fd(), go_r.as_raw_fd());
    let spawner = std::thread::spawn(move || {
        let mut cmd = std::process::Command::new("true");
        // SAFETY: write(2) and read(2) only, as a pre_exec hook must.
        unsafe {
            cmd.pre_exec(move || {
                libc::write(fw, b"f".as_ptr().cast(), 1);
                let mut b = [0u8; 1];
                libc::read(gr, b.as_mut_ptr().cast(), 1);
                Ok(())
            });
        }
        cmd.status().unwrap()
    });
    let mut b = [0u8; 1];
    // SAFETY: a read into a one-byte buffer from a pipe this test owns.
    assert_eq!(
        unsafe { libc::read(forked_r.as_raw_fd(), b.as_mut_ptr().cast(), 1) },
        1
    );
    drop(first);
    let again = Sqlite::open(&path, 1 << 30);
    // SAFETY: a one-byte write to a pipe this test owns: the child may exec now.
    unsafe { libc::write(go_w.as_raw_fd(), b"g".as_ptr().cast(), 1) };
    assert!(spawner.join().unwrap().success());
    assert!(again.is_ok(), "{:?}", again.err());
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
    StoreOp::Task(TaskStoreOp::Insert(Box::new(StoredTask {
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
    })))
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
                meter: None,
                budget: None,
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
    assert_eq!(s.version().unwrap(), Some(SCHEMA_VERSION));
    let loaded = s.load().unwrap();
    assert_eq!(loaded.envelopes.len(), 1);
    assert_eq!(loaded.envelopes[0].attempts, 1);
    assert!(s.load_tasks().unwrap().is_empty());
    s.stage(&[task(1, 'c')]).unwrap();
    s.commit().unwrap();
    assert_eq!(s.load_tasks().unwrap().len(), 1);
}

/// A schema 3 store (the release before receipts) opens as schema 4: its rows keep every
/// column, read back with no reader, and a state written afterwards keeps its reader.
#[test]
fn schema_3_is_migrated_to_4_keeping_rows_and_adding_the_reader() {
    let path = tmp("migrate34");
    {
        let c = Connection::open(&path).unwrap();
        c.execute_batch(&format!(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             INSERT INTO meta VALUES ('schema_version', '3');{SCHEMA_V2}{SCHEMA_V3_TASKS}
             INSERT INTO envelopes VALUES (5, 'a', 'q1', 'b', 'task', NULL,
                 '{{\"id\":\"q1\",\"from\":\"a\",\"to\":\"b\"}}', 1, zeroblob(32), 100,
                 'queued', NULL, 100);
             INSERT INTO envelopes VALUES (6, 'a', 'q2', 'b', 'task', NULL, NULL, 0,
                 zeroblob(32), 100, 'acked', NULL, 120);"
        ))
        .unwrap();
    }
    let mut s = Sqlite::open(&path, 1 << 30).unwrap();
    assert_eq!(s.version().unwrap(), Some(SCHEMA_VERSION));
    let loaded = s.load().unwrap();
    assert_eq!(loaded.envelopes.len(), 1);
    assert_eq!(loaded.envelopes[0].attempts, 1);
    assert_eq!(
        loaded
            .ids
            .iter()
            .map(|i| (i.seq, i.state.as_str(), i.state_ms, i.reader))
            .collect::<Vec<_>>(),
        [(5, "queued", 100, None), (6, "acked", 120, None)]
    );
    s.stage(&[StoreOp::State {
        seq: 5,
        sender: "b".into(),
        id: "q1".into(),
        state: "acked".into(),
        detail: None,
        reader: Some(agent_hub_proto::wire::Reader::McpAwait),
        at_ms: 200,
    }])
    .unwrap();
    s.commit().unwrap();
    drop(s);
    let mut s = Sqlite::open(&path, 1 << 30).unwrap();
    let ids = s.load().unwrap().ids;
    assert_eq!(ids[0].reader, Some(agent_hub_proto::wire::Reader::McpAwait));
    assert_eq!(ids[1].reader, None);
}

/// A sink that takes `take` rows, then refuses the next one.
struct Refusing {
    take: usize,
    seen: Vec<u64>,
    expected: Option<usize>,
}

use agent_hub_proto::hub::durable::RowRefused;

impl crate::store::RowSink for Refusing {
    fn expect(&mut self, rows: usize) {
        self.expected = Some(rows);
    }
    fn row(&mut self, row: crate::store::RowRef<'_>) -> Result<(), RowRefused> {
        if self.seen.len() == self.take {
            return Err(RowRefused::SameSenderAndId {
                first: 0,
                seq: row.seq,
            });
        }
        self.seen.push(row.seq);
        Ok(())
    }
}

/// `load_rows` across its reader thread (`load`): every row in order, over many batches, with
/// the seq span as the hint; a sink's refusal ends the load with its text as the store's
/// error (the reader stops), and the store still commits afterwards.
#[test]
fn load_rows_streams_in_order_and_stops_at_a_refusal() {
    let path = tmp("load-rows");
    let mut s = Sqlite::open(&path, 1 << 30).unwrap();
    let n = 5_000u64;
    let ops: Vec<StoreOp> = (10..10 + n)
        .map(|seq| insert(seq, "b", &format!("id{seq}")))
        .collect();
    s.stage(&ops).unwrap();
    s.commit().unwrap();
    let mut all = Refusing {
        take: usize::MAX,
        seen: Vec::new(),
        expected: None,
    };
    s.load_rows(&mut all).unwrap();
    assert_eq!(all.seen, (10..10 + n).collect::<Vec<_>>());
    assert_eq!(all.expected, Some(n as usize));
    let mut some = Refusing {
        take: 3_000,
        seen: Vec::new(),
        expected: None,
    };
    match s.load_rows(&mut some) {
        Err(StoreError::Corrupt(e)) => {
            assert_eq!(
                e.to_string(),
                "rows seq 0 and seq 3010 hold the same sender and id"
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(some.seen.len(), 3_000);
    s.stage(&[insert(20_000, "b", "after")]).unwrap();
    s.commit().unwrap();
    assert_eq!(s.load().unwrap().ids.len(), n as usize + 1);
}

/// Keeps what the hub's sink would: each queued row's text as the tail it would hold.
#[derive(Default)]
struct Tails(Vec<(u64, agent_hub_proto::wire::envelope_text::Tail)>);

impl crate::store::RowSink for Tails {
    fn row(&mut self, row: crate::store::RowRef<'_>) -> Result<(), RowRefused> {
        if let Some(q) = row.queued {
            let tail = agent_hub_proto::wire::envelope_text::Tail::from_stored(q.text, q.split);
            self.0.push((row.seq, tail));
        }
        Ok(())
    }
}

/// A row whose text is the canonical text of its columns comes with where its `ts` and body
/// are, across the reader thread (`load`), and the tail cut there writes the text back byte
/// for byte; a text in any other spelling still passes the general check and is kept whole;
/// a text that names another recipient is refused as before.
#[test]
fn canonical_texts_load_split_and_others_whole() {
    let path = tmp("load-split");
    let mut s = Sqlite::open(&path, 1 << 30).unwrap();
    let env = agent_hub_proto::wire::Envelope::new(
        "00000000-0000-4000-8000-000000000007".into(),
        "a".into(),
        "b".into(),
        "2026-12-03T10:00:00.5Z".into(),
        "task".into(),
        Some("c\"1".into()),
        "{\"x\": [1, 2]}".into(),
    )
    .unwrap();
    let canonical = env.to_json();
    // The same envelope from another sender, with a space the canonical text does not have.
    let spaced = canonical
        .replacen("\"from\":\"a\"", "\"from\":\"a2\"", 1)
        .replacen(",\"from\"", ", \"from\"", 1);
    let mut ops = Vec::new();
    for (seq, from, text) in [(1, "a", &canonical), (2, "a2", &spaced)] {
        let mut op = insert(seq, "b", &env.id);
        if let StoreOp::Insert {
            text: t,
            correlation_id,
            sender,
            ..
        } = &mut op
        {
            *t = Arc::from(text.as_str());
            *correlation_id = env.correlation_id.clone();
            *sender = from.into();
        }
        ops.push(op);
    }
    s.stage(&ops).unwrap();
    s.commit().unwrap();
    let mut tails = Tails::default();
    s.load_rows(&mut tails).unwrap();
    let p = |from| agent_hub_proto::wire::envelope_text::Parts {
        id: &env.id,
        from,
        to: "b",
        kind: "task",
        correlation_id: env.correlation_id.as_deref(),
    };
    assert_eq!(tails.0.len(), 2);
    let (first, second) = (&tails.0[0].1, &tails.0[1].1);
    assert!(!first.is_verbatim());
    assert_eq!(first.text(&p("a")), canonical);
    assert!(first.held_bytes() < canonical.len() / 2);
    assert!(second.is_verbatim());
    assert_eq!(second.text(&p("a2")), spaced);
    drop(s);

    // a text for another recipient: refused, canonical or not
    let path = tmp("load-split-wrong");
    let mut s = Sqlite::open(&path, 1 << 30).unwrap();
    let mut op = insert(1, "b", &env.id);
    if let StoreOp::Insert { text, .. } = &mut op {
        *text = Arc::from(canonical.replacen("\"to\":\"b\"", "\"to\":\"z\"", 1));
    }
    s.stage(&[op]).unwrap();
    s.commit().unwrap();
    match s.load_rows(&mut Tails::default()) {
        Err(StoreError::Corrupt(e)) => assert!(e.to_string().contains("\"to\" differs"), "{e}"),
        other => panic!("{other:?}"),
    }
}

/// A schema 4 store (the release before approvals) opens as schema 5: its task rows keep
/// every column and read back with no permission and no rules (the operator's bound, as
/// before), and the requests table starts empty.
#[test]
fn schema_4_is_migrated_to_5_keeping_tasks_and_adding_requests() {
    let path = tmp("migrate45");
    {
        let c = Connection::open(&path).unwrap();
        c.execute_batch(&format!(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             INSERT INTO meta VALUES ('schema_version', '4');{SCHEMA_V2}{SCHEMA_V3_TASKS}{SCHEMA_V4_READER}
             INSERT INTO tasks (seq, task, delegator, agent, peer, cwd, prompt, timeout_secs,
                 progress_secs, state, created_ms)
                 VALUES (3, '{}', 'a', 'codex', NULL, '/w', 'P', 60, 0, 'queued', 100);",
            task_id('d')
        ))
        .unwrap();
    }
    let mut s = Sqlite::open(&path, 1 << 30).unwrap();
    assert_eq!(s.version().unwrap(), Some(SCHEMA_VERSION));
    let tasks = s.load_tasks().unwrap();
    assert_eq!(tasks.len(), 1);
    assert_eq!((tasks[0].seq, tasks[0].prompt.as_str()), (3, "P"));
    assert_eq!(
        (tasks[0].permission.as_deref(), tasks[0].allow.as_deref()),
        (None, None)
    );
    assert!(s.load_requests().unwrap().is_empty());
}

fn request(request: &str, hex: char) -> StoreOp {
    StoreOp::Task(TaskStoreOp::OpenRequest(crate::store::StoredRequest {
        request: request.into(),
        task: task_id(hex),
        seq: 1,
        kind: "permission".into(),
        tool_kind: None,
        opened_ms: 5000,
        expires_ms: 6000,
    }))
}

/// A task keeps its delegator's `permission` and `allow`; an open request's row is written
/// with its open, gone with its close, and gone with its task's `Forget`; what is left after
/// a reopen is what a restart closes (issue 37 design §4.6).
#[test]
fn approvals_rows_apply_and_load() {
    let path = tmp("approvals");
    {
        let mut s = Sqlite::open(&path, 1 << 30).unwrap();
        let StoreOp::Task(TaskStoreOp::Insert(mut row)) = task(1, 'a') else {
            unreachable!()
        };
        row.permission = Some("reject".into());
        row.allow = Some("[{\"kinds\":[\"read\"]}]".into());
        s.stage(&[
            StoreOp::Task(TaskStoreOp::Insert(row)),
            task(2, 'b'),
            request("req-00000000000000a1", 'a'),
            request("req-00000000000000a2", 'a'),
            request("req-00000000000000b1", 'b'),
        ])
        .unwrap();
        s.commit().unwrap();
        s.stage(&[
            StoreOp::Task(TaskStoreOp::CloseRequest {
                request: "req-00000000000000a1".into(),
            }),
            StoreOp::Task(TaskStoreOp::Forget { task: task_id('b') }),
        ])
        .unwrap();
        s.commit().unwrap();
    }
    let mut s = Sqlite::open(&path, 1 << 30).unwrap();
    let tasks = s.load_tasks().unwrap();
    assert_eq!(tasks[0].permission.as_deref(), Some("reject"));
    assert_eq!(tasks[0].allow.as_deref(), Some("[{\"kinds\":[\"read\"]}]"));
    let left: Vec<String> = s
        .load_requests()
        .unwrap()
        .into_iter()
        .map(|r| r.request)
        .collect();
    assert_eq!(left, ["req-00000000000000a2"]);
}

/// A schema 5 store (the release before issue 38) opens as schema 6: its task and request
/// rows keep every column, the new ones read back as none (no session, no figures, no
/// budget), and the turns table starts empty (docs/design/tasks.md §8).
#[test]
fn schema_5_is_migrated_to_6_keeping_tasks_and_requests() {
    let path = tmp("migrate56");
    {
        let c = Connection::open(&path).unwrap();
        c.execute_batch(&format!(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             INSERT INTO meta VALUES ('schema_version', '5');{SCHEMA_V2}{SCHEMA_V3_TASKS}{SCHEMA_V4_READER}{SCHEMA_V5_APPROVALS}
             INSERT INTO tasks (seq, task, delegator, agent, peer, cwd, prompt, timeout_secs,
                 progress_secs, state, created_ms, ended_ms, elapsed_ms, permission)
                 VALUES (3, '{}', 'a', 'codex', NULL, '/w', '', 60, 0, 'completed', 100, 200,
                     100, 'ask');
             INSERT INTO requests VALUES ('req-00000000000000a1', '{}', 1, 'permission', NULL,
                 1, 2);",
            task_id('d'),
            task_id('d')
        ))
        .unwrap();
    }
    let mut s = Sqlite::open(&path, 1 << 30).unwrap();
    assert_eq!(s.version().unwrap(), Some(6));
    let tasks = s.load_tasks().unwrap();
    assert_eq!(tasks.len(), 1);
    let t = &tasks[0];
    assert_eq!((t.seq, t.state.as_str()), (3, "completed"));
    assert_eq!(t.permission.as_deref(), Some("ask"));
    assert_eq!(
        (
            t.meter.as_deref(),
            t.budget.as_deref(),
            t.session_id.as_deref()
        ),
        (None, None, None)
    );
    assert_eq!((t.turn, t.restarts, t.kept_until_ms), (0, 0, None));
    assert_eq!(s.load_requests().unwrap().len(), 1);
    let turns: i64 = s
        .conn
        .query_row("SELECT count(*) FROM turns", [], |r| r.get(0))
        .unwrap();
    assert_eq!(turns, 0);
}

/// A task's budget is written with its row and its figures with its settle; both read back
/// after a reopen (a task's usage survives a restart, issue 38 design §8); `Forget` removes
/// its turns' rows too.
#[test]
fn usage_columns_apply_load_and_turns_go_with_forget() {
    let path = tmp("usage");
    let meter = r#"{"turns":1,"sums":[10,5,15,null,null,null],"reported":[1,1,1,0,0,0],"token_source":"acp","closed_cost":null,"run_cost":0.25,"currency":"USD","cost_source":"acp","cost_partial":false,"tokens_lost":false,"context":{"used":100,"size":200}}"#;
    let budget = r#"{"maxCostUsd":0.5,"allowUnmetered":false,"kept":true}"#;
    {
        let mut s = Sqlite::open(&path, 1 << 30).unwrap();
        let StoreOp::Task(TaskStoreOp::Insert(mut row)) = task(1, 'a') else {
            unreachable!()
        };
        row.budget = Some(budget.into());
        s.stage(&[StoreOp::Task(TaskStoreOp::Insert(row)), task(2, 'b')])
            .unwrap();
        s.commit().unwrap();
        s.stage(&[StoreOp::Task(TaskStoreOp::Settle {
            task: task_id('a'),
            state: "completed".into(),
            stop_reason: None,
            reason: None,
            ended_ms: 5,
            elapsed_ms: 1,
            meter: Some(meter.into()),
            budget: None,
        })])
        .unwrap();
        s.commit().unwrap();
        s.conn
            .execute(
                "INSERT INTO turns (task, turn, state, how, started_ms) VALUES (?1, 1, 'completed', 'prompt', 1)",
                [task_id('b')],
            )
            .unwrap();
    }
    let mut s = Sqlite::open(&path, 1 << 30).unwrap();
    let tasks = s.load_tasks().unwrap();
    assert_eq!(tasks[0].meter.as_deref(), Some(meter));
    assert_eq!(
        tasks[0].budget.as_deref(),
        Some(budget),
        "a settle without one keeps it"
    );
    assert_eq!(tasks[1].meter, None);
    s.stage(&[StoreOp::Task(TaskStoreOp::Forget { task: task_id('b') })])
        .unwrap();
    s.commit().unwrap();
    let turns: i64 = s
        .conn
        .query_row("SELECT count(*) FROM turns", [], |r| r.get(0))
        .unwrap();
    assert_eq!(turns, 0);
}

/// A `meter` column this build did not write refuses the store at startup, naming the
/// column, never its text.
#[test]
fn a_meter_column_that_is_not_ours_is_refused() {
    let path = tmp("badmeter");
    {
        let mut s = Sqlite::open(&path, 1 << 30).unwrap();
        s.stage(&[task(1, 'a')]).unwrap();
        s.commit().unwrap();
        s.conn
            .execute("UPDATE tasks SET meter = 'SECRET{'", [])
            .unwrap();
    }
    let mut s = Sqlite::open(&path, 1 << 30).unwrap();
    let e = s.load_tasks().unwrap_err().to_string();
    assert!(
        e.contains("meter is not the JSON this hub writes there"),
        "{e}"
    );
    assert!(!e.contains("SECRET"), "{e}");
}
