//! The store's background thread: `fdatasync` of the SQLite write-ahead log, and WAL
//! checkpoints, off the event loop (PLAN.md §2, SPEC §12.1, docs/operations.md "The WAL and
//! its checkpoints").
//!
//! The loop commits each batch with `synchronous=NORMAL` (written to the WAL, safe against a
//! hub crash) and, with `store.sync = "full"`, asks this thread to flush it; replies that
//! promise durability wait for the flush to be reported. While one flush runs, later commits
//! pile up and the next flush covers them all, so the device sees one flush per round however
//! busy the hub is, and the loop never blocks on the disk.
//!
//! Checkpoints (copying the WAL back into the database, two device flushes each) run here too,
//! on a second SQLite connection, never on the loop: the loop's connection has
//! `wal_autocheckpoint = 0` and reports the WAL's length after each commit
//! (`Flusher::wal_committed`); past `CHECKPOINT_PAGES` this thread runs a PASSIVE checkpoint,
//! which copies what it can while the loop keeps committing. SQLite reuses the WAL from its
//! start only when a commit begins after a checkpoint copied every frame, which commits landing
//! during the checkpoint can prevent for ever under steady load; so past `HOLD_PAGES` the loop
//! holds its commits (`holds_commits`, the same way it gathers commits during a flush) until
//! the running checkpoint ends, which then copies everything, and the next commit starts the
//! WAL over. That bounds the WAL without the loop ever waiting on a lock or the disk.
//!
//! Owns: the thread, its channels, the descriptors it flushes, the checkpoint policy. Refuses:
//! deciding what a flush means for anyone's reply (the core does, in `Hub::synced`).

use std::fmt;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a flush ended: `Ok`, or the error text (an I/O error from the kernel). Text, because
/// it goes as it is to `Hub::handle_synced`, whose error is the core's.
pub type FlushResult = Result<(), String>;

/// Why the background thread's work could not be done or asked for.
#[derive(Debug)]
pub enum BackgroundError {
    /// The thread is gone (it cannot panic short of a bug): nothing more will be flushed.
    Stopped,
    /// A checkpoint was asked of a store that has none.
    NoCheckpoints,
    /// SQLite's checkpoint failed.
    Checkpoint(rusqlite::Error),
    /// The checkpoint found no WAL.
    NotWal,
}

impl fmt::Display for BackgroundError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackgroundError::Stopped => write!(f, "the store's flush thread has stopped"),
            BackgroundError::NoCheckpoints => write!(f, "this store has no checkpoints"),
            BackgroundError::Checkpoint(e) => write!(f, "{e}"),
            BackgroundError::NotWal => write!(f, "the store is not in WAL mode"),
        }
    }
}

impl std::error::Error for BackgroundError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BackgroundError::Checkpoint(e) => Some(e),
            _ => None,
        }
    }
}

/// WAL frames (pages) after a commit at which a checkpoint is asked for. The hub rewrites the
/// same few tail pages commit after commit, so a longer WAL holds many copies of each and a
/// checkpoint copies each distinct page once: 8192 pages of 4 KiB (32 MiB) keeps checkpoints,
/// and the two device flushes each costs, rare next to the commits' own flushes.
pub const CHECKPOINT_PAGES: u32 = 8192;

/// WAL frames past which commits wait for the running checkpoint (module doc): four times
/// `CHECKPOINT_PAGES`, 128 MiB at 4 KiB pages, so under ordinary load the loop never holds a
/// commit, and the WAL cannot grow much past this however long the load lasts.
pub const HOLD_PAGES: u32 = 4 * CHECKPOINT_PAGES;

/// After a failed checkpoint, the next is not asked for before this long (the WAL keeps the
/// data meanwhile; a failing disk must not turn every commit into a retry).
pub const CHECKPOINT_RETRY: Duration = Duration::from_secs(1);

/// Failed checkpoints after the first are logged at most this often, with their count.
pub const CHECKPOINT_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// What actually flushes: `fdatasync` on the files in production, a script in tests.
pub trait Flush: Send + 'static {
    fn flush(&mut self) -> io::Result<()>;
}

/// What a checkpoint found: frames in the WAL, and how many of them are now in the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpointed {
    pub wal_frames: u32,
    pub copied: u32,
    /// SQLite's checkpoint lock was taken for a moment: nothing ran (the next commit past the
    /// threshold asks again).
    pub busy: bool,
}

/// Copies the WAL into the database without blocking writers (SQLite's PASSIVE mode, on a
/// connection of its own), or a script in tests.
pub trait Checkpoint: Send + 'static {
    fn checkpoint(&mut self) -> Result<Checkpointed, BackgroundError>;
}

/// The work a store hands the background thread: the flush when `store.sync = "full"`, and
/// its checkpoints.
pub struct Background {
    pub flush: Option<Box<dyn Flush>>,
    pub checkpoint: Box<dyn Checkpoint>,
}

/// Flushes the WAL file (and, once, the folder that holds it, so the file's creation is
/// durable too). The descriptor is opened on first use and kept: SQLite keeps its WAL file for
/// as long as the store is open, rewriting it from the start after checkpoints.
pub struct WalFlush {
    wal: PathBuf,
    file: Option<File>,
    dir_synced: bool,
}

impl WalFlush {
    pub fn new(wal: PathBuf) -> WalFlush {
        WalFlush {
            wal,
            file: None,
            dir_synced: false,
        }
    }
}

impl Flush for WalFlush {
    fn flush(&mut self) -> io::Result<()> {
        if self.file.is_none() {
            match File::open(&self.wal) {
                Ok(f) => self.file = Some(f),
                // No WAL yet means no commit has written one: nothing to flush.
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        self.file.as_ref().expect("opened above").sync_data()?;
        if !self.dir_synced {
            if let Some(dir) = self.wal.parent() {
                sync_dir(dir)?;
            }
            self.dir_synced = true;
        }
        Ok(())
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    File::open(dir)?.sync_all()
}

/// A request to the thread.
enum Job {
    /// Flush everything committed up to this batch.
    Flush(u64),
    Checkpoint,
}

/// A report from the thread.
enum Report {
    Flushed(u64, FlushResult),
    Checkpointed(Result<Checkpointed, BackgroundError>),
}

/// The checkpoint policy's state, kept by the loop's handle (module doc). Pure: time is
/// passed in.
#[derive(Debug)]
pub struct CheckpointPolicy {
    /// `CHECKPOINT_PAGES` and `HOLD_PAGES` (smaller in tests).
    ask_pages: u32,
    hold_pages: u32,
    /// A checkpoint was asked for and has not reported.
    running: bool,
    /// Commits wait for the running checkpoint: the WAL passed `HOLD_PAGES`.
    hold: bool,
    /// No checkpoint is asked for before this (after a failure).
    retry_at: Option<Instant>,
    failures: u64,
    unlogged_failures: u64,
    last_failure_log: Option<Instant>,
    /// Checkpoints that reported success.
    pub done: u64,
}

impl Default for CheckpointPolicy {
    fn default() -> CheckpointPolicy {
        CheckpointPolicy::with_pages(CHECKPOINT_PAGES, HOLD_PAGES)
    }
}

impl CheckpointPolicy {
    /// A policy asking at `ask_pages` and holding commits at `hold_pages`.
    pub fn with_pages(ask_pages: u32, hold_pages: u32) -> CheckpointPolicy {
        CheckpointPolicy {
            ask_pages,
            hold_pages,
            running: false,
            hold: false,
            retry_at: None,
            failures: 0,
            unlogged_failures: 0,
            last_failure_log: None,
            done: 0,
        }
    }

    /// A commit left the WAL `frames` long: true if a checkpoint should be asked for now.
    pub fn committed(&mut self, frames: u32, now: Instant) -> bool {
        if frames >= self.hold_pages && self.running {
            self.hold = true;
        }
        if self.running || frames < self.ask_pages || self.retry_at.is_some_and(|t| now < t) {
            return false;
        }
        self.running = true;
        self.hold = frames >= self.hold_pages;
        true
    }

    /// Commits must wait for the running checkpoint.
    pub fn holds_commits(&self) -> bool {
        self.running && self.hold
    }

    /// The checkpoint ended; a service-log line to write, if any.
    pub fn finished(
        &mut self,
        result: &Result<Checkpointed, BackgroundError>,
        now: Instant,
    ) -> Option<(&'static str, String)> {
        self.running = false;
        self.hold = false;
        match result {
            Ok(c) => {
                if !c.busy {
                    self.done += 1;
                }
                self.retry_at = None;
                let failed = std::mem::take(&mut self.failures);
                self.unlogged_failures = 0;
                (failed > 0).then(|| {
                    (
                        "INFO",
                        format!("queue store checkpoints succeed again after {failed} failures"),
                    )
                })
            }
            Err(e) => {
                self.failures += 1;
                self.retry_at = Some(agent_hub_proto::kernel::deadline::after(
                    now,
                    CHECKPOINT_RETRY,
                ));
                let due = self.last_failure_log.map_or(true, |t| {
                    now.saturating_duration_since(t) >= CHECKPOINT_LOG_INTERVAL
                });
                if !due {
                    self.unlogged_failures += 1;
                    return None;
                }
                self.last_failure_log = Some(now);
                let more = std::mem::take(&mut self.unlogged_failures);
                let also = if more > 0 {
                    format!(" ({more} more failures since the last line)")
                } else {
                    String::new()
                };
                Some((
                    "ERROR",
                    format!(
                        "queue store checkpoint failed: {e}{also}; the WAL keeps every commit and grows until a checkpoint succeeds (check the disk)"
                    ),
                ))
            }
        }
    }
}

/// The loop's handle on the background thread.
pub struct Flusher {
    requests: Sender<Job>,
    done: Receiver<Report>,
    /// The newest batch asked for and not yet reported.
    pending: Option<u64>,
    /// Whether the thread flushes (`store.sync = "full"`); without, only checkpoints run.
    syncs: bool,
    checkpoints: CheckpointPolicy,
    /// Service-log lines for the loop to write (`take_logs`).
    logs: Vec<(&'static str, String)>,
}

impl Flusher {
    /// Starts a thread that only flushes (no checkpoints).
    pub fn spawn(flush: impl Flush, wake: Arc<dyn Fn() + Send + Sync>) -> io::Result<Flusher> {
        Flusher::start(Some(Box::new(flush)), None, wake)
    }

    /// Starts the thread for a store's background work. `wake` runs after every report (the
    /// loop's `mio::Waker`), so the loop learns of it without polling.
    pub fn spawn_background(
        work: Background,
        wake: Arc<dyn Fn() + Send + Sync>,
    ) -> io::Result<Flusher> {
        Flusher::start(work.flush, Some(work.checkpoint), wake)
    }

    fn start(
        mut flush: Option<Box<dyn Flush>>,
        mut checkpoint: Option<Box<dyn Checkpoint>>,
        wake: Arc<dyn Fn() + Send + Sync>,
    ) -> io::Result<Flusher> {
        let syncs = flush.is_some();
        let (req_tx, req_rx) = mpsc::channel::<Job>();
        let (done_tx, done_rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("store-flush".into())
            .spawn(move || {
                // Blocks for a request, then takes every request that queued up meanwhile:
                // one flush covers them all, since each was committed before it was asked.
                // The flush goes first: replies wait for it, nobody waits for a checkpoint
                // but the loop's held commits, which a checkpoint starting later would not
                // help.
                while let Ok(first) = req_rx.recv() {
                    let mut through = None;
                    let mut ckpt = false;
                    for job in std::iter::once(first).chain(req_rx.try_iter()) {
                        match job {
                            Job::Flush(b) => through = Some(through.map_or(b, |t: u64| t.max(b))),
                            Job::Checkpoint => ckpt = true,
                        }
                    }
                    if let Some(through) = through {
                        let result = match &mut flush {
                            Some(f) => f.flush().map_err(|e| e.to_string()),
                            None => Ok(()),
                        };
                        if done_tx.send(Report::Flushed(through, result)).is_err() {
                            return;
                        }
                        wake();
                    }
                    if ckpt {
                        let result = match &mut checkpoint {
                            Some(c) => c.checkpoint(),
                            None => Err(BackgroundError::NoCheckpoints),
                        };
                        if done_tx.send(Report::Checkpointed(result)).is_err() {
                            return;
                        }
                        wake();
                    }
                }
            })?;
        Ok(Flusher {
            requests: req_tx,
            done: done_rx,
            pending: None,
            syncs,
            checkpoints: CheckpointPolicy::default(),
            logs: Vec::new(),
        })
    }

    /// Whether commits are flushed to disk here (`store.sync = "full"`): only then do replies
    /// wait for a flush.
    pub fn syncs(&self) -> bool {
        self.syncs
    }

    /// Asks for everything committed up to `batch` to be flushed.
    pub fn request(&mut self, batch: u64) -> Result<(), BackgroundError> {
        if self.requests.send(Job::Flush(batch)).is_err() {
            return Err(BackgroundError::Stopped);
        }
        self.pending = Some(batch);
        Ok(())
    }

    /// A commit left the WAL `frames` long: asks for a checkpoint when the policy says so.
    pub fn wal_committed(&mut self, frames: u32) {
        if self.checkpoints.committed(frames, Instant::now())
            && self.requests.send(Job::Checkpoint).is_err()
        {
            self.finish_checkpoint(Err(BackgroundError::Stopped));
        }
    }

    /// Commits must wait for the running checkpoint (module doc).
    pub fn holds_commits(&self) -> bool {
        self.checkpoints.holds_commits()
    }

    /// Replaces the checkpoint policy's thresholds (tests that drive a real WAL past them
    /// without writing 128 MiB).
    pub fn set_checkpoint_pages(&mut self, ask_pages: u32, hold_pages: u32) {
        self.checkpoints = CheckpointPolicy::with_pages(ask_pages, hold_pages);
    }

    /// Checkpoints that succeeded so far.
    pub fn checkpoints_done(&self) -> u64 {
        self.checkpoints.done
    }

    /// Service-log lines about checkpoints, for the loop to write.
    pub fn take_logs(&mut self) -> Vec<(&'static str, String)> {
        std::mem::take(&mut self.logs)
    }

    fn finish_checkpoint(&mut self, result: Result<Checkpointed, BackgroundError>) {
        if let Some(line) = self.checkpoints.finished(&result, Instant::now()) {
            self.logs.push(line);
        }
    }

    fn flushed(&mut self, through: u64) {
        if self.pending.is_some_and(|p| p <= through) {
            self.pending = None;
        }
    }

    /// The next finished flush, if one has been reported; checkpoint reports are taken on the
    /// way. A flush thread that died (it cannot panic short of a bug) reports every pending
    /// batch as failed rather than leave replies waiting forever.
    pub fn completed(&mut self) -> Option<(u64, FlushResult)> {
        loop {
            match self.done.try_recv() {
                Ok(Report::Flushed(through, r)) => {
                    self.flushed(through);
                    return Some((through, r));
                }
                Ok(Report::Checkpointed(r)) => self.finish_checkpoint(r),
                Err(TryRecvError::Empty) => return None,
                Err(TryRecvError::Disconnected) => {
                    if self.checkpoints.running {
                        self.finish_checkpoint(Err(BackgroundError::Stopped));
                    }
                    return self
                        .pending
                        .take()
                        .map(|p| (p, Err(BackgroundError::Stopped.to_string())));
                }
            }
        }
    }

    /// A batch was asked for and is not reported yet.
    pub fn is_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// A flush is pending or a checkpoint holds commits: at shutdown, staged work can still
    /// be committed and flushed once this clears.
    pub fn is_busy(&self) -> bool {
        self.is_pending() || self.holds_commits()
    }

    /// Blocks until every requested flush is reported and no checkpoint holds commits, or until
    /// `deadline` (used at shutdown: a disk that hangs must not hang the exit). Whatever is
    /// still pending at the deadline stays pending.
    pub fn wait_all(&mut self, deadline: Instant) -> Vec<(u64, FlushResult)> {
        let mut out = Vec::new();
        while self.is_busy() {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.done.recv_timeout(left) {
                Ok(Report::Flushed(through, r)) => {
                    self.flushed(through);
                    out.push((through, r));
                }
                Ok(Report::Checkpointed(r)) => self.finish_checkpoint(r),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => {
                    if self.checkpoints.running {
                        self.finish_checkpoint(Err(BackgroundError::Stopped));
                    }
                    if let Some(p) = self.pending.take() {
                        out.push((p, Err(BackgroundError::Stopped.to_string())));
                    }
                }
            }
        }
        out
    }
}

// No Drop: dropping the request sender ends the thread after its current flush. It is not
// joined, so a flush stuck on a dead disk cannot keep the process from exiting.

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Condvar, Mutex};

    /// A flush that blocks until the test opens a gate, counting calls; fails when told.
    #[derive(Clone, Default)]
    struct Gate {
        state: Arc<(Mutex<(usize, bool)>, Condvar)>,
        calls: Arc<AtomicUsize>,
        fail: Arc<Mutex<bool>>,
    }

    impl Gate {
        fn open(&self, n: usize) {
            let (m, cv) = &*self.state;
            m.lock().unwrap().0 += n;
            cv.notify_all();
        }
    }

    impl Flush for Gate {
        fn flush(&mut self) -> io::Result<()> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            let (m, cv) = &*self.state;
            let mut g = m.lock().unwrap();
            while g.0 == 0 {
                g = cv.wait(g).unwrap();
            }
            g.0 -= 1;
            if *self.fail.lock().unwrap() {
                return Err(io::Error::other("injected EIO"));
            }
            Ok(())
        }
    }

    fn noop_wake() -> Arc<dyn Fn() + Send + Sync> {
        Arc::new(|| {})
    }

    fn far() -> Instant {
        Instant::now() + std::time::Duration::from_secs(60)
    }

    #[test]
    fn waiting_at_shutdown_gives_up_at_its_deadline_on_a_hung_flush() {
        let gate = Gate::default();
        let mut f = Flusher::spawn(gate.clone(), noop_wake()).unwrap();
        f.request(1).unwrap();
        // The gate never opens: the flush hangs like one on a dead disk.
        let reports = f.wait_all(Instant::now() + std::time::Duration::from_millis(20));
        assert!(reports.is_empty());
        assert!(f.is_pending(), "still pending: nothing was confirmed");
        drop(f); // must not block on the stuck thread
        gate.open(1); // let the thread finish so the test process stays tidy
    }

    #[test]
    fn requests_that_queue_during_a_flush_share_the_next_one() {
        let gate = Gate::default();
        let mut f = Flusher::spawn(gate.clone(), noop_wake()).unwrap();
        f.request(1).unwrap();
        // The thread is now inside flush 1 (or about to be); 2, 3 and 4 queue behind it.
        while gate.calls.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        for b in 2..=4 {
            f.request(b).unwrap();
        }
        gate.open(2);
        let reports = f.wait_all(far());
        assert_eq!(reports, vec![(1, Ok(())), (4, Ok(()))]);
        assert_eq!(gate.calls.load(Ordering::SeqCst), 2);
        assert!(!f.is_pending());
    }

    #[test]
    fn a_failed_flush_is_reported_with_its_error() {
        let gate = Gate::default();
        *gate.fail.lock().unwrap() = true;
        let mut f = Flusher::spawn(gate.clone(), noop_wake()).unwrap();
        f.request(7).unwrap();
        gate.open(1);
        let reports = f.wait_all(far());
        assert_eq!(reports.len(), 1);
        assert_eq!(reports[0].0, 7);
        assert!(reports[0].1.as_ref().unwrap_err().contains("injected EIO"));
    }

    #[test]
    fn the_wake_callback_runs_after_each_report() {
        let gate = Gate::default();
        let woken = Arc::new(AtomicUsize::new(0));
        let w = woken.clone();
        let mut f = Flusher::spawn(
            gate.clone(),
            Arc::new(move || {
                w.fetch_add(1, Ordering::SeqCst);
            }),
        )
        .unwrap();
        f.request(1).unwrap();
        gate.open(1);
        assert_eq!(f.wait_all(far()), vec![(1, Ok(()))]);
        // The report was sent before the wake ran; wait for the wake without sleeping blind.
        while woken.load(Ordering::SeqCst) == 0 {
            std::thread::yield_now();
        }
        assert!(f.completed().is_none());
    }

    #[test]
    fn the_policy_asks_at_the_threshold_once_and_holds_commits_past_the_hard_bound() {
        let t0 = Instant::now();
        let mut p = CheckpointPolicy::default();
        assert!(!p.committed(CHECKPOINT_PAGES - 1, t0));
        assert!(p.committed(CHECKPOINT_PAGES, t0), "asked at the threshold");
        assert!(!p.holds_commits(), "below the hard bound commits go on");
        assert!(!p.committed(CHECKPOINT_PAGES + 10, t0), "one at a time");
        // The WAL keeps growing during the checkpoint: past the hard bound, commits wait.
        assert!(!p.committed(HOLD_PAGES, t0));
        assert!(p.holds_commits());
        let ok = Ok(Checkpointed {
            wal_frames: HOLD_PAGES,
            copied: HOLD_PAGES,
            busy: false,
        });
        assert_eq!(p.finished(&ok, t0), None);
        assert!(!p.holds_commits(), "the checkpoint ended: commits go on");
        // A commit that finds the WAL still past the hard bound asks again and holds at once,
        // so that checkpoint copies every frame and the next commit starts the WAL over.
        assert!(p.committed(HOLD_PAGES + 3, t0));
        assert!(p.holds_commits());
        p.finished(&ok, t0);
        assert!(!p.committed(12, t0), "a WAL started over asks for nothing");
        assert_eq!(p.done, 2);
    }

    #[test]
    fn a_failed_checkpoint_waits_before_the_next_and_its_log_lines_are_bounded() {
        let t0 = Instant::now();
        let mut p = CheckpointPolicy::default();
        let failed = Err(BackgroundError::Checkpoint(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_IOERR),
            Some("disk I/O error".to_owned()),
        )));
        let mut lines = Vec::new();
        let mut asked = 0;
        // Ten minutes of commits every 10 ms against a failing disk.
        for ms in (0..600_000u64).step_by(10) {
            let now = t0 + Duration::from_millis(ms);
            if p.committed(HOLD_PAGES * 2, now) {
                asked += 1;
                lines.extend(p.finished(&failed, now));
            }
        }
        assert!(asked <= 601, "at most one try a second: {asked}");
        assert!(asked >= 590, "but retried every second: {asked}");
        assert_eq!(lines.len(), 10, "one line a minute: {lines:?}");
        assert!(
            lines[1].1.contains("more failures since the last line"),
            "{lines:?}"
        );
        let back = p.finished(
            &Ok(Checkpointed {
                wal_frames: 1,
                copied: 1,
                busy: false,
            }),
            t0 + Duration::from_secs(601),
        );
        assert!(back.unwrap().1.contains("succeed again"));
    }

    /// Counts checkpoints; each reports what it was told.
    #[derive(Clone, Default)]
    struct CountingCheckpoint {
        calls: Arc<AtomicUsize>,
    }

    impl Checkpoint for CountingCheckpoint {
        fn checkpoint(&mut self) -> Result<Checkpointed, BackgroundError> {
            self.calls.fetch_add(1, Ordering::SeqCst);
            Ok(Checkpointed {
                wal_frames: 9,
                copied: 9,
                busy: false,
            })
        }
    }

    #[test]
    fn the_thread_runs_a_held_checkpoint_and_its_report_releases_the_commits() {
        let ckpt = CountingCheckpoint::default();
        let mut f = Flusher::spawn_background(
            Background {
                flush: None,
                checkpoint: Box::new(ckpt.clone()),
            },
            noop_wake(),
        )
        .unwrap();
        assert!(!f.syncs(), "no flush: sync = normal");
        f.wal_committed(100);
        assert!(!f.is_busy());
        f.wal_committed(HOLD_PAGES + 1);
        assert!(f.holds_commits() && f.is_busy());
        assert!(f.wait_all(far()).is_empty(), "no flush was asked for");
        assert!(!f.holds_commits());
        assert_eq!(ckpt.calls.load(Ordering::SeqCst), 1);
        assert_eq!(f.checkpoints_done(), 1);
    }

    #[test]
    fn wal_flush_syncs_an_existing_file_and_tolerates_a_missing_one() {
        let dir = std::env::temp_dir().join(format!("agent-hub-flush-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let wal = dir.join("q.db-wal");
        let _ = std::fs::remove_file(&wal);
        let mut f = WalFlush::new(wal.clone());
        f.flush().unwrap(); // no WAL yet
        std::fs::write(&wal, b"frames").unwrap();
        f.flush().unwrap();
        assert!(f.file.is_some() && f.dir_synced);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
