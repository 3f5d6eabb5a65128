//! The loopback floor of a connection-per-op operation on this machine: W1's shape (connect,
//! a line answered, a second line answered, close) against a server inside the bench that
//! only answers lines. Both sides run in this process, so its CPU over the window divided by
//! the connections made is the least CPU one such connection costs here, client, server and
//! kernel together. W4 spends four of them per round trip under the hub's contract (one verb
//! per connection, SPEC §3), so `cpus × 1 s / (4 × floor)` bounds the round trips/s of any
//! server held to that contract on this machine (docs/performance.md "W4: what bounds it").

use super::conn::{Parsed, PeerConn};
use super::window::Window;
use crate::base::Res;
use crate::hub_process::cpu_of_pid;
use crate::stats::Cpu;
use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What the floor run measured.
pub(crate) struct Floor {
    pub(crate) connections: usize,
    pub(crate) cpu: Cpu,
}

impl Floor {
    /// CPU µs per connection, client, server and kernel together.
    pub(crate) fn us_per_connection(&self) -> Option<f64> {
        (self.connections > 0).then(|| {
            self.cpu
                .clock_us_per(self.connections)
                .unwrap_or_else(|| self.cpu.us_per(self.connections))
        })
    }
}

/// The lines the floor's clients write: as long as the hub's `hello` and a 128-byte-body
/// `send`, so the kernel copies as much as it does for the hub.
const HELLO: &[u8] =
    b"{\"hello\":{\"name\":\"bench-p0\",\"token\":\"0123456789abcdef0123456789abcdef\"}}\n";

/// Runs `clients` client threads for a window of `secs` against one event-loop thread that
/// answers each line with one short line.
pub(crate) fn floor(clients: usize, secs: f64, body_bytes: usize) -> Res<Floor> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("floor bind: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("floor address: {e}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let server = {
        let stop = stop.clone();
        std::thread::spawn(move || serve(listener, &stop))
    };
    let send = send_line(body_bytes);
    let window = Window::starting_now(secs);
    let workers: Vec<_> = (0..clients)
        .map(|_| {
            let send = send.clone();
            std::thread::spawn(move || -> Res<usize> {
                let mut n = 0;
                while !window.over() {
                    let t0 = Instant::now();
                    one(addr, &send)?;
                    if window.counts(t0, Instant::now()) {
                        n += 1;
                    }
                }
                Ok(n)
            })
        })
        .collect();
    let me = std::process::id() as i32;
    std::thread::sleep(window.warm_end.saturating_duration_since(Instant::now()));
    let a = cpu_of_pid(me)?;
    std::thread::sleep(window.end.saturating_duration_since(Instant::now()));
    let b = cpu_of_pid(me)?;
    let counted: Res<Vec<usize>> = workers
        .into_iter()
        .map(|w| {
            w.join()
                .map_err(|_| "a floor client panicked".to_string())?
        })
        .collect();
    stop.store(true, Ordering::SeqCst);
    server
        .join()
        .map_err(|_| "the floor's server panicked".to_string())??;
    Ok(Floor {
        connections: counted?.iter().sum(),
        cpu: b.saturating_sub(a),
    })
}

fn send_line(body_bytes: usize) -> Arc<[u8]> {
    let pad = "x".repeat(body_bytes);
    let line = format!(
        "{{\"send\":{{\"id\":\"6f1c2a4e-8b3d-4f5a-9c7e-0d1b2a3c4d5e\",\"from\":\"bench-p0\",\"to\":\"bench-sink\",\"ts\":\"2026-12-02T00:00:00.000Z\",\"kind\":\"bench\",\"body\":{{\"pad\":\"{pad}\"}}}}}}\n"
    );
    Arc::from(line.into_bytes())
}

/// One W1-shaped connection: connect, hello → a line, send → a line, close, through the
/// same connection code as every target's client (`PeerConn`).
fn one(addr: SocketAddr, send: &[u8]) -> Res<()> {
    let mut c = PeerConn::connect(addr)?;
    for out in [HELLO, send] {
        c.write(out)?;
        c.next(line)?;
    }
    Ok(())
}

/// Any line, as a parser for `PeerConn::next`.
fn line(buf: &[u8]) -> Parsed<()> {
    Ok(buf.iter().position(|&b| b == b'\n').map(|i| ((), i + 1)))
}

/// One thread, one mio event loop (the hub's own shape, PLAN.md §1) that answers every line
/// of every connection with one short line and does nothing else, until `stop`.
fn serve(listener: std::net::TcpListener, stop: &AtomicBool) -> Res<()> {
    use mio::net::TcpListener as MioListener;
    use mio::{Events, Interest, Poll, Token};
    use std::collections::HashMap;
    use std::io::Read;
    const LISTENER: Token = Token(usize::MAX);
    listener
        .set_nonblocking(true)
        .map_err(|e| format!("floor: {e}"))?;
    let mut listener = MioListener::from_std(listener);
    let mut poll = Poll::new().map_err(|e| format!("floor poll: {e}"))?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)
        .map_err(|e| format!("floor register: {e}"))?;
    let mut events = Events::with_capacity(256);
    let mut conns: HashMap<usize, mio::net::TcpStream> = HashMap::new();
    let mut next = 0usize;
    let mut buf = [0u8; 4096];
    while !stop.load(Ordering::SeqCst) {
        if let Err(e) = poll.poll(&mut events, Some(Duration::from_millis(50))) {
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(format!("floor poll: {e}"));
        }
        for ev in events.iter() {
            if ev.token() == LISTENER {
                while let Ok((mut s, _)) = listener.accept() {
                    let _ = s.set_nodelay(true);
                    let t = next;
                    next += 1;
                    if poll
                        .registry()
                        .register(&mut s, Token(t), Interest::READABLE)
                        .is_ok()
                    {
                        conns.insert(t, s);
                    }
                }
                continue;
            }
            let t = ev.token().0;
            let Some(s) = conns.get_mut(&t) else {
                continue;
            };
            let mut close = false;
            loop {
                match s.read(&mut buf) {
                    Ok(0) => {
                        close = true;
                        break;
                    }
                    Ok(n) => {
                        // The floor's clients write one line and wait for its answer, so
                        // a short reply per newline never blocks.
                        for _ in buf[..n].iter().filter(|&&b| b == b'\n') {
                            if s.write_all(b"{\"ok\":{}}\n").is_err() {
                                close = true;
                            }
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => {
                        close = true;
                        break;
                    }
                }
            }
            if close {
                if let Some(mut s) = conns.remove(&t) {
                    let _ = poll.registry().deregister(&mut s);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_floor_counts_connections_and_cpu() {
        let f = floor(2, 0.3, 128).expect("floor runs");
        assert!(f.connections > 0, "no connection counted");
        let per = f.us_per_connection().expect("connections made");
        assert!(per > 0.0, "a connection cost no CPU: {per}");
    }
}
