//! SIGTERM and SIGINT as a readable event in the mio loop (the self-pipe pattern).
//!
//! Owns the process's handlers for those two signals. The handler only writes one byte to a
//! non-blocking socket, which is async-signal-safe; everything else happens in the loop.

use mio::net::UnixStream;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, IntoRawFd};
use std::sync::atomic::{AtomicI32, Ordering};

static WAKE_FD: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(_sig: libc::c_int) {
    let fd = WAKE_FD.load(Ordering::Relaxed);
    if fd >= 0 {
        let byte = 1u8;
        // SAFETY: write(2) is async-signal-safe; the buffer is a live local; a full pipe or a
        // closed fd only makes the write fail, which is harmless here.
        unsafe {
            libc::write(fd, (&byte as *const u8).cast(), 1);
        }
    }
}

/// The read end, registered with the loop; readable once a signal arrived.
pub struct Signals {
    pub receiver: UnixStream,
}

impl Signals {
    /// Installs the handlers. Call once per process.
    pub fn install() -> io::Result<Signals> {
        let (receiver, sender) = UnixStream::pair()?;
        WAKE_FD.store(sender.into_raw_fd(), Ordering::Relaxed);
        for sig in [libc::SIGTERM, libc::SIGINT] {
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
        let _ = receiver.as_raw_fd();
        Ok(Signals { receiver })
    }

    /// Drains the wake bytes; true if any signal arrived.
    pub fn drain(&mut self) -> bool {
        let mut buf = [0u8; 64];
        let mut got = false;
        loop {
            match self.receiver.read(&mut buf) {
                Ok(0) => return got,
                Ok(_) => got = true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(_) => return got,
            }
        }
    }
}
