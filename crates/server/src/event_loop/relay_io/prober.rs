//! The relay's one prober thread shape (issue 36): a thread that computes a value off the
//! event loop, at once, again every `every` and whenever the loop asks (`refresh`), and hands
//! each result over a channel the loop drains without blocking (`latest`). The agent cards
//! (`cards`: each installed binary's `--version`) and this machine's headroom (`headroom`:
//! /proc and statvfs) are both one. Generic over what it computes, so the loop's calls are
//! static: no boxed closure, no trait object. Refuses: what the value is or means.

use std::sync::mpsc;
use std::time::Duration;

/// A prober thread's far end. Dropping it stops the thread at its next wake-up.
pub(super) struct Prober<T> {
    /// The values computed, oldest first (`latest` keeps the newest).
    pub(super) rx: mpsc::Receiver<T>,
    /// A message asks for a new value now; dropping it ends the thread.
    poke: mpsc::Sender<()>,
}

impl<T: Send + 'static> Prober<T> {
    /// Starts the thread `name`, which computes a value with `compute` now, then after every
    /// `every` or poke, until this prober is dropped.
    pub(super) fn start<F>(name: &str, every: Duration, compute: F) -> std::io::Result<Prober<T>>
    where
        F: Fn() -> T + Send + 'static,
    {
        let (tx, rx) = mpsc::channel();
        let (poke, poked) = mpsc::channel::<()>();
        std::thread::Builder::new()
            .name(name.into())
            .spawn(move || loop {
                if tx.send(compute()).is_err() {
                    return;
                }
                // Sleeps until the refresh or a poke, or ends when the relay is gone.
                match poked.recv_timeout(every) {
                    Ok(()) => while poked.try_recv().is_ok() {},
                    Err(mpsc::RecvTimeoutError::Timeout) => {}
                    Err(mpsc::RecvTimeoutError::Disconnected) => return,
                }
            })?;
        Ok(Prober { rx, poke })
    }

    /// Asks for a new value now; it arrives through `latest`.
    pub(super) fn refresh(&self) {
        // The thread is gone only when this prober is dropped: nothing to ask then.
        let _ = self.poke.send(());
    }

    /// The newest value computed since the last call, if any.
    pub(super) fn latest(&self) -> Option<T> {
        self.rx.try_iter().last()
    }
}
