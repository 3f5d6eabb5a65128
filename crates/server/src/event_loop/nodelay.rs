//! TCP_NODELAY for client sockets, set once on the listener where the kernel copies it to
//! every accepted socket (Linux does: an accepted socket is cloned from its listener, options
//! included), instead of one `setsockopt` per connection.
//!
//! Owns that one socket option. Refuses: everything else about the listener (`startup` binds
//! it, the loop accepts from it). Replies and deliveries must leave at once (one write per
//! line), so Nagle's delay must be off on every client socket; where the listener cannot
//! carry it, the loop still sets it per connection (docs/performance.md, issue 13).

use mio::net::TcpListener;
use std::os::fd::AsRawFd;

/// Sets TCP_NODELAY on `listener` so its accepted sockets inherit it. True when they do; false
/// means the caller sets it on each accepted socket.
pub fn inherit_from_listener(listener: &TcpListener) -> bool {
    if !cfg!(target_os = "linux") {
        return false;
    }
    let one: libc::c_int = 1;
    // SAFETY: setsockopt on a descriptor the listener owns, with a pointer to a local c_int
    // and its exact size.
    let rc = unsafe {
        libc::setsockopt(
            listener.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    rc == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reason the per-connection `setsockopt` can go: a socket accepted from a listener
    /// that has the option has it too.
    #[test]
    fn accepted_sockets_carry_the_listeners_nodelay() {
        let listener = TcpListener::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let inherited = inherit_from_listener(&listener);
        assert_eq!(inherited, cfg!(target_os = "linux"));
        let addr = listener.local_addr().unwrap();
        let _client = std::net::TcpStream::connect(addr).unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let accepted = loop {
            match listener.accept() {
                Ok((s, _)) => break s,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(std::time::Instant::now() < deadline, "no connection");
                    std::thread::yield_now();
                }
                Err(e) => panic!("{e}"),
            }
        };
        if inherited {
            assert!(accepted.nodelay().unwrap(), "TCP_NODELAY not inherited");
        }
    }
}
