//! The terminal under `agent-hub top`: raw mode through termios (libc, PLAN.md §10; no
//! terminal crate), the alternate screen, the window size, waiting for a key with a timeout,
//! and putting everything back — on a normal exit, on a panic, and on SIGTERM, SIGHUP,
//! SIGINT or SIGQUIT.
//!
//! Owns the process's terminal state while the view runs. The signal handlers only set a
//! flag (async-signal-safe); the loop sees it when `poll` returns and leaves through the same
//! restore as `q`. Refuses drawing: `render` makes the text, `run` writes it.

use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};
use std::time::Duration;

/// The settings found at `enter`, put back by `restore`. None when the terminal is not ours.
static SAVED: Mutex<Option<libc::termios>> = Mutex::new(None);
static STOP: AtomicBool = AtomicBool::new(false);
static PANIC_HOOK: Once = Once::new();

/// Leaves the alternate screen and shows the cursor again.
const LEAVE: &str = "\x1b[?25h\x1b[?1049l";
/// Enters the alternate screen, hides the cursor, clears.
const ENTER: &str = "\x1b[?1049h\x1b[?25l\x1b[2J";

extern "C" fn on_signal(_sig: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

pub fn is_tty(fd: libc::c_int) -> bool {
    // SAFETY: isatty has no preconditions; a bad fd just answers 0.
    unsafe { libc::isatty(fd) == 1 }
}

/// Whether a stop signal arrived.
pub fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
}

/// The terminal while the view owns it; dropping it restores the terminal.
pub struct Screen {
    _private: (),
}

impl Screen {
    /// Raw mode on stdin (no echo, no line editing, no signals from keys: Ctrl-C arrives as a
    /// byte the view reads as quit), the alternate screen on stdout, handlers for the stop
    /// signals, and a panic hook that restores first.
    pub fn enter() -> io::Result<Screen> {
        // SAFETY: a zeroed termios is a valid buffer for tcgetattr to fill.
        let mut t: libc::termios = unsafe { std::mem::zeroed() };
        // SAFETY: fd 0 and a live, writable termios.
        if unsafe { libc::tcgetattr(0, &mut t) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let saved = t;
        t.c_lflag &= !(libc::ICANON | libc::ECHO | libc::ISIG | libc::IEXTEN);
        t.c_iflag &= !(libc::IXON | libc::ICRNL);
        t.c_cc[libc::VMIN] = 0;
        t.c_cc[libc::VTIME] = 0;
        *SAVED.lock().unwrap_or_else(|p| p.into_inner()) = Some(saved);
        // SAFETY: fd 0 and a termios made from the one tcgetattr filled.
        if unsafe { libc::tcsetattr(0, libc::TCSANOW, &t) } != 0 {
            let e = io::Error::last_os_error();
            SAVED.lock().unwrap_or_else(|p| p.into_inner()).take();
            return Err(e);
        }
        for sig in [libc::SIGTERM, libc::SIGHUP, libc::SIGINT, libc::SIGQUIT] {
            // SAFETY: a zeroed sigaction is "no flags, empty mask"; the handler is an
            // extern "C" fn of the sa_handler signature. No SA_RESTART: `poll` must return
            // (EINTR) so the loop sees the flag at once.
            unsafe {
                let mut action: libc::sigaction = std::mem::zeroed();
                action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                libc::sigemptyset(&mut action.sa_mask);
                libc::sigaction(sig, &action, std::ptr::null_mut());
            }
        }
        PANIC_HOOK.call_once(|| {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore();
                previous(info);
            }));
        });
        let mut out = io::stdout().lock();
        out.write_all(ENTER.as_bytes())?;
        out.flush()?;
        Ok(Screen { _private: () })
    }

    /// Columns and rows; 80×24 when the terminal does not say.
    pub fn size(&self) -> (usize, usize) {
        // SAFETY: a zeroed winsize is a valid buffer for TIOCGWINSZ to fill.
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        // SAFETY: fd 1, the request TIOCGWINSZ and a live winsize, as ioctl_tty(2) says.
        let ok = unsafe { libc::ioctl(1, libc::TIOCGWINSZ, &mut ws) } == 0;
        if ok && ws.ws_col > 0 && ws.ws_row > 0 {
            (ws.ws_col as usize, ws.ws_row as usize)
        } else {
            (80, 24)
        }
    }

    /// Waits up to `timeout` for keys; returns the bytes read (none after a timeout or a
    /// signal).
    pub fn keys(&self, timeout: Duration) -> io::Result<Vec<u8>> {
        let mut fds = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
        // SAFETY: one live pollfd, count 1.
        let n = unsafe { libc::poll(&mut fds, 1, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted {
                Ok(Vec::new())
            } else {
                Err(e)
            };
        }
        if n == 0 || fds.revents & libc::POLLIN == 0 {
            if fds.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the terminal went away",
                ));
            }
            return Ok(Vec::new());
        }
        let mut buf = [0u8; 64];
        // SAFETY: fd 0 and a live buffer of the length given.
        let got = unsafe { libc::read(0, buf.as_mut_ptr().cast(), buf.len()) };
        match got {
            n if n > 0 => Ok(buf[..n as usize].to_vec()),
            0 => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the terminal went away",
            )),
            _ => {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    Ok(Vec::new())
                } else {
                    Err(e)
                }
            }
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        restore();
    }
}

/// Puts the terminal back as `enter` found it; does nothing the second time.
fn restore() {
    let saved = SAVED.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(t) = saved {
        let mut out = io::stdout();
        let _ = out.write_all(LEAVE.as_bytes());
        let _ = out.flush();
        // SAFETY: fd 0 and the termios tcgetattr filled at `enter`.
        unsafe {
            libc::tcsetattr(0, libc::TCSANOW, &t);
        }
    }
}
