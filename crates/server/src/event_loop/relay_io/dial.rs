//! Dialling a relay peer (docs/relay-protocol.md §2; PLAN.md relay): the dial itself, the
//! redial backoff (`[relay] reconnect_backoff_ms`), and the address a dial leaves from
//! (`dial_source`, `connect_from`: a non-blocking connect bound to the listen IP). Refuses:
//! the handshake (`relay::session`) and link bookkeeping after the connect (`link`).

use super::link::Link;
use super::RelayIo;
use agent_hub_host::config::PeerConfig;
use agent_hub_proto::relay::links::Direction;
use agent_hub_proto::relay::session::Session;
use mio::net::TcpStream;
use mio::{Interest, Registry, Token};
use std::io::{self};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

impl RelayIo {
    pub(super) fn dial(&mut self, registry: &Registry, peer: &PeerConfig, now: Instant) {
        let Some(addr) = peer.address else { return };
        let token = Token(self.next_token);
        self.next_token += 1;
        let book = self
            .books
            .get_mut(&peer.id)
            .expect("every configured peer has a book");
        book.next_dial = None;
        book.status.state = "connecting".into();
        self.status_dirty = true;
        let source = dial_source(self.local_addr(), addr);
        let connected = match source {
            Some(ip) => connect_from(ip, addr),
            None => TcpStream::connect(addr),
        };
        let mut stream = match connected {
            Ok(s) => s,
            Err(e) => {
                let from = source.map(|ip| format!(" from {ip}")).unwrap_or_default();
                self.logs.push((
                    "WARN",
                    format!("relay: dialling {} at {addr}{from} failed: {e}", peer.id),
                ));
                self.schedule_redial(&peer.id.clone(), now);
                return;
            }
        };
        if registry
            .register(&mut stream, token, Interest::READABLE | Interest::WRITABLE)
            .is_err()
        {
            self.schedule_redial(&peer.id.clone(), now);
            return;
        }
        let (nonce, seed) = self.entropy();
        let auth = self.keys[&peer.id].clone();
        let mut session = Session::dialer(self.session_cfg(now), &peer.id, auth, nonce, seed, now);
        session.set_directory_caps(self.directory_caps);
        self.books.get_mut(&peer.id).expect("book").dialling = Some(token);
        let mut link = Link::new(stream, session, Direction::Dialled, addr);
        link.peer = Some(peer.id.clone());
        link.connecting = true;
        link.writable_interest = true;
        self.links.insert(token, link);
    }

    pub(super) fn schedule_redial(&mut self, peer: &str, now: Instant) {
        let Some(book) = self.books.get_mut(peer) else {
            return;
        };
        let waits = &self.cfg.reconnect_backoff_ms;
        let wait = waits[book.backoff_step.min(waits.len() - 1)];
        book.backoff_step += 1;
        book.next_dial = Some(agent_hub_proto::kernel::deadline::after(
            now,
            Duration::from_millis(wait),
        ));
        book.dialling = None;
        book.status.state = "backoff".into();
        self.status_dirty = true;
    }
}

/// The address a dial to `peer` leaves from: the relay's listen IP, so the peer sees the
/// address it knows this hub by (the one it would dial back, and the one its failed-handshake
/// count is kept for) rather than whatever source the kernel's routing picks. None — the
/// kernel chooses, as for any outgoing connection — when there is no listener, when it listens
/// on every address (`0.0.0.0`, `::`: no one address is ours), when the families differ, and
/// when the listen IP is loopback but the peer is not (a loopback source cannot reach another
/// machine).
fn dial_source(listen: Option<SocketAddr>, peer: SocketAddr) -> Option<IpAddr> {
    let ip = listen?.ip();
    let usable = !ip.is_unspecified()
        && ip.is_ipv4() == peer.is_ipv4()
        && (peer.ip().is_loopback() || !ip.is_loopback());
    usable.then_some(ip)
}

/// The socket type for `connect_from`: non-blocking and close-on-exec from the start where the
/// platform lets `socket` say so (no window in which a forked child could inherit it).
#[cfg(any(target_os = "linux", target_os = "android"))]
const SOCKET_TYPE: libc::c_int = libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC;
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const SOCKET_TYPE: libc::c_int = libc::SOCK_STREAM;

/// Starts a TCP connection to `peer` from `source` (port 0: the kernel picks one) without
/// blocking the loop. `mio::net::TcpStream::connect` cannot bind first and std's `connect`
/// blocks, so: `socket`, `bind`, then a non-blocking `connect`, which returns at once
/// (`EINPROGRESS`); the loop learns the outcome when the socket turns writable, exactly as for
/// a mio connect (`handle_event`: `take_error`, `peer_addr`). An error here is immediate (no
/// such local address, no route).
fn connect_from(source: IpAddr, peer: SocketAddr) -> io::Result<TcpStream> {
    let domain = if peer.is_ipv4() {
        libc::AF_INET
    } else {
        libc::AF_INET6
    };
    // SAFETY: `socket` takes no pointers; its result is checked before any use.
    let raw = unsafe { libc::socket(domain, SOCKET_TYPE, 0) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a socket just created here that nothing else owns; from now on the
    // OwnedFd (then the stream) owns it and closes it on every path, errors included.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        // SAFETY: `fcntl` on a descriptor we own, with an integer argument.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFD, libc::FD_CLOEXEC) } != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    let stream = std::net::TcpStream::from(fd);
    // Already so on Linux (SOCK_NONBLOCK); elsewhere this is what makes `connect` return at once.
    stream.set_nonblocking(true)?;
    let (local, local_len) = sockaddr(SocketAddr::new(source, 0));
    // SAFETY: `local` is a sockaddr_storage holding a sockaddr of the socket's family, valid
    // for `local_len` bytes; `bind` only reads it, during the call.
    let bound = unsafe {
        libc::bind(
            stream.as_raw_fd(),
            (&local as *const libc::sockaddr_storage).cast(),
            local_len,
        )
    };
    if bound != 0 {
        return Err(io::Error::last_os_error());
    }
    let (remote, remote_len) = sockaddr(peer);
    // SAFETY: as for `bind`: a valid sockaddr of `remote_len` bytes, only read by `connect`.
    let started = unsafe {
        libc::connect(
            stream.as_raw_fd(),
            (&remote as *const libc::sockaddr_storage).cast(),
            remote_len,
        )
    };
    if started != 0 {
        let e = io::Error::last_os_error();
        // EINPROGRESS: the usual answer of a non-blocking connect. EINTR: a signal arrived, and
        // the connection goes on in the background (POSIX); both end in writability.
        if e.raw_os_error() != Some(libc::EINPROGRESS) && e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(TcpStream::from_std(stream))
}

/// `addr` as a C socket address for `bind`/`connect`, with its length.
fn sockaddr(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain old data; all-zero bytes are a valid (unspecified)
    // address, and every field not set below stays zero as the C API expects.
    let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is at least as large as sockaddr_in and aligned for
            // every socket address type (that is its purpose); the borrow ends in this arm.
            let sin = unsafe {
                &mut *(&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            // The octets are already in network order; keep their bytes as they are.
            sin.sin_addr.s_addr = u32::from_ne_bytes(a.ip().octets());
            std::mem::size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe {
                &mut *(&mut storage as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_scope_id = a.scope_id();
            std::mem::size_of::<libc::sockaddr_in6>()
        }
    };
    (storage, len as libc::socklen_t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn a_dial_leaves_from_the_listen_ip_when_that_can_work() {
        let peer = addr("127.0.0.2:7000");
        let ip = |s: &str| Some(s.parse::<IpAddr>().unwrap());
        assert_eq!(
            dial_source(Some(addr("127.0.0.3:0")), peer),
            ip("127.0.0.3")
        );
        assert_eq!(
            dial_source(Some(addr("127.0.0.3:9000")), peer),
            ip("127.0.0.3")
        );
        assert_eq!(
            dial_source(Some(addr("10.1.2.3:9000")), addr("10.9.9.9:7000")),
            ip("10.1.2.3")
        );
        // A non-loopback listen IP may reach a loopback peer (it is a local address too).
        assert_eq!(
            dial_source(Some(addr("10.1.2.3:9000")), peer),
            ip("10.1.2.3")
        );
        assert_eq!(
            dial_source(Some(addr("[fd00::1]:9000")), addr("[fd00::2]:7000")),
            ip("fd00::1")
        );
        // The kernel chooses: no listener, every address, another family, loopback to remote.
        assert_eq!(dial_source(None, peer), None);
        assert_eq!(dial_source(Some(addr("0.0.0.0:9000")), peer), None);
        assert_eq!(
            dial_source(Some(addr("[::]:9000")), addr("[::1]:7000")),
            None
        );
        assert_eq!(dial_source(Some(addr("[::1]:9000")), peer), None);
        assert_eq!(
            dial_source(Some(addr("127.0.0.3:9000")), addr("[::1]:7000")),
            None
        );
        assert_eq!(
            dial_source(Some(addr("127.0.0.3:9000")), addr("10.9.9.9:7000")),
            None
        );
    }

    /// Waits (bounded) until the non-blocking connect has an outcome, as the loop would on
    /// writability.
    fn outcome(s: &TcpStream) -> io::Result<SocketAddr> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(e) = s.take_error()? {
                return Err(e);
            }
            match s.peer_addr() {
                Ok(a) => return Ok(a),
                Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                Err(e) => return Err(e),
            }
        }
    }

    #[test]
    fn connect_from_binds_the_source_and_never_blocks() {
        let listener = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
        let to = listener.local_addr().unwrap();
        let t0 = Instant::now();
        let s = connect_from("127.0.0.3".parse().unwrap(), to).unwrap();
        let local = s.local_addr().unwrap();
        assert_eq!(local.ip().to_string(), "127.0.0.3");
        assert_ne!(local.port(), 0, "the kernel picked a port");
        assert_eq!(outcome(&s).unwrap(), to);
        let (_accepted, from) = listener.accept().unwrap();
        assert_eq!(from, local, "the acceptor sees the bound source");
        assert!(t0.elapsed() < Duration::from_secs(5));

        // A refused connection: reported later (writability), or at once; never a hang.
        let closed = {
            let l = std::net::TcpListener::bind("127.0.0.2:0").unwrap();
            l.local_addr().unwrap()
        };
        match connect_from("127.0.0.3".parse().unwrap(), closed) {
            Ok(s) => assert!(outcome(&s).is_err()),
            Err(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused),
        }
        // A source address that is not this machine's: refused by bind, at once.
        let e = connect_from("192.0.2.1".parse().unwrap(), to).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EADDRNOTAVAIL), "{e}");
    }
}
