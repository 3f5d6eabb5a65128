//! SIGTERM, SIGINT and SIGHUP as a readable event in the mio loop (the self-pipe pattern).
//!
//! Owns the process's handlers for those three signals. A handler only sets its flag and
//! writes one byte to a non-blocking socket, both async-signal-safe; everything else happens
//! in the loop. The flags, not the bytes, say which signal came: a flood of SIGHUPs that
//! fills the socket's buffer can drop bytes but never hide a SIGTERM, since a full buffer is
//! itself readable and the flag is set before the byte is written.

use mio::net::UnixStream;
use std::io::{self, Read};
use std::os::fd::IntoRawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};

static WAKE_FD: AtomicI32 = AtomicI32::new(-1);
/// SIGTERM or SIGINT arrived: stop (SPEC §4.6).
static STOP: AtomicBool = AtomicBool::new(false);
/// SIGHUP arrived: reload the roster and the agent manifests (docs/operations.md, "Changing
/// the roster", "Reloading agent manifests").
static RELOAD: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(sig: libc::c_int) {
    if sig == libc::SIGHUP {
        RELOAD.store(true, Ordering::SeqCst);
    } else {
        STOP.store(true, Ordering::SeqCst);
    }
    let fd = WAKE_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        let byte = 1u8;
        // SAFETY: write(2) is async-signal-safe; the buffer is a live local; a full pipe or a
        // closed fd only makes the write fail, which is harmless here (the flag is set).
        unsafe {
            libc::write(fd, (&byte as *const u8).cast(), 1);
        }
    }
}

/// What the signals that arrived since the last `drain` ask for.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    /// SIGTERM or SIGINT: shut down.
    pub stop: bool,
    /// SIGHUP: reload the roster and the agent manifests. Any number of SIGHUPs before one
    /// drain are one reload.
    pub reload: bool,
}

/// The read end, registered with the loop; readable once a signal arrived.
pub struct Signals {
    pub receiver: UnixStream,
}

impl Signals {
    /// Installs the handlers. Call once per process.
    pub fn install() -> io::Result<Signals> {
        let (receiver, sender) = UnixStream::pair()?;
        WAKE_FD.store(sender.into_raw_fd(), Ordering::SeqCst);
        for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
            // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value; the handler
            // is an extern "C" fn with the signature sigaction expects for sa_handler.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                action.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut action.sa_mask);
                if libc::sigaction(sig, &action, std::ptr::null_mut()) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        // A peer closing our connection must never kill the process.
        // SAFETY: setting SIGPIPE to SIG_IGN has no preconditions.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
        }
        Ok(Signals { receiver })
    }

    /// Drains the wake bytes, then takes the flags. A signal that lands after the flags are
    /// taken leaves its byte (or a full buffer) behind, so the loop wakes for it again.
    pub fn drain(&mut self) -> Pending {
        let mut buf = [0u8; 64];
        loop {
            match self.receiver.read(&mut buf) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            }
        }
        Pending {
            stop: STOP.swap(false, Ordering::SeqCst),
            reload: RELOAD.swap(false, Ordering::SeqCst),
        }
    }
}
