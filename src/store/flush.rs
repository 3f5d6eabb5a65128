//! The store's flush thread: `fdatasync` of the SQLite write-ahead log off the event loop
//! (PLAN.md §2, SPEC §12.1).
//!
//! The loop commits each batch with `synchronous=NORMAL` (written to the WAL, safe against a
//! hub crash) and asks this thread to flush it; replies that promise durability wait for the
//! flush to be reported. While one flush runs, later commits pile up and the next flush
//! covers them all, so the device sees one flush per round however busy the hub is, and the
//! loop never blocks on the disk.
//!
//! Owns: the thread, its two channels and the descriptors it flushes. Refuses: deciding what a
//! flush means for anyone's reply (the core does, in `Hub::synced`).

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::Arc;
use std::time::Instant;

/// How a flush ended: `Ok`, or the error text (an I/O error from the kernel).
pub type FlushResult = Result<(), String>;

/// What actually flushes: `fdatasync` on the files in production, a script in tests.
pub trait Flush: Send + 'static {
    fn flush(&mut self) -> io::Result<()>;
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

/// The loop's handle on the flush thread.
pub struct Flusher {
    requests: Sender<u64>,
    done: Receiver<(u64, FlushResult)>,
    /// The newest batch asked for and not yet reported.
    pending: Option<u64>,
}

impl Flusher {
    /// Starts the thread. `wake` runs after every report (the loop's `mio::Waker`), so the
    /// loop learns of it without polling.
    pub fn spawn(mut flush: impl Flush, wake: Arc<dyn Fn() + Send + Sync>) -> io::Result<Flusher> {
        let (req_tx, req_rx) = mpsc::channel::<u64>();
        let (done_tx, done_rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("store-flush".into())
            .spawn(move || {
                // Blocks for a request, then takes every request that queued up meanwhile:
                // one flush covers them all, since each was committed before it was asked.
                while let Ok(mut through) = req_rx.recv() {
                    while let Ok(b) = req_rx.try_recv() {
                        through = through.max(b);
                    }
                    let result = flush.flush().map_err(|e| e.to_string());
                    if done_tx.send((through, result)).is_err() {
                        return;
                    }
                    wake();
                }
            })?;
        Ok(Flusher {
            requests: req_tx,
            done: done_rx,
            pending: None,
        })
    }

    /// Asks for everything committed up to `batch` to be flushed.
    pub fn request(&mut self, batch: u64) -> Result<(), String> {
        if self.requests.send(batch).is_err() {
            return Err("the store's flush thread has stopped".to_owned());
        }
        self.pending = Some(batch);
        Ok(())
    }

    /// The next finished flush, if one has been reported. A flush thread that died (it cannot
    /// panic short of a bug) reports every pending batch as failed rather than leave replies
    /// waiting forever.
    pub fn completed(&mut self) -> Option<(u64, FlushResult)> {
        match self.done.try_recv() {
            Ok((through, r)) => {
                if self.pending.is_some_and(|p| p <= through) {
                    self.pending = None;
                }
                Some((through, r))
            }
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => self
                .pending
                .take()
                .map(|p| (p, Err("the store's flush thread has stopped".to_owned()))),
        }
    }

    /// A batch was asked for and is not reported yet.
    pub fn is_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Blocks until every requested flush is reported, or until `deadline` (used at
    /// shutdown: a disk that hangs must not hang the exit). Whatever is still pending at the
    /// deadline stays pending.
    pub fn wait_all(&mut self, deadline: Instant) -> Vec<(u64, FlushResult)> {
        let mut out = Vec::new();
        while self.pending.is_some() {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.done.recv_timeout(left) {
                Ok((through, r)) => {
                    if self.pending.is_some_and(|p| p <= through) {
                        self.pending = None;
                    }
                    out.push((through, r));
                }
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => {
                    if let Some(p) = self.pending.take() {
                        out.push((p, Err("the store's flush thread has stopped".to_owned())));
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
