//! Waiting for stdin to become readable before a deadline: the hooks' bounded reads of what
//! the agent writes them (`hook turn-*` drops its event JSON, `drain --confirm` reads `ok`;
//! docs/delivery.md). A caller that never writes or never closes stdin cannot hold a hook.

use std::time::Instant;

/// True once fd 0 is readable (data, end of file or a hang-up: the next read says which);
/// false when `deadline` passes first or poll fails. An interrupted poll waits on.
pub fn readable_by(deadline: Instant) -> bool {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        let mut pfd = libc::pollfd {
            fd: 0,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().min(i32::MAX as u128) as libc::c_int;
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n > 0 {
            return true;
        }
        if n == 0 || std::io::Error::last_os_error().kind() != std::io::ErrorKind::Interrupted {
            return false;
        }
    }
}
