//! Who may hold a relay connection (docs/relay-protocol.md, "Limits"): the caps on accepted
//! relay connections — in all, still in their handshake, and per source address — the refusal
//! of an address after failed handshakes (what v0 acceptors do:
//! docs/relay-protocol.md §2.4), and the tally of refusals, reported as one summed line per
//! `REFUSAL_LOG_INTERVAL`, never a line per refusal. Also the rule that relay connections and
//! client connections fit in the process's descriptors together (`check_descriptors`), and
//! the rate limit on log lines peers and strangers trigger (`throttled`).
//!
//! Sans-IO apart from `nofile_limit` (one `getrlimit`): the caller passes addresses and `now`,
//! and writes the lines it is given. Refuses: sockets, and anything after the handshake (the
//! session's and `relay_io`'s).

use agent_hub_host::config::RelayLimits;
use agent_hub_proto::relay::session::{PeerAuth, PeerKeys, SessionStats};
use agent_hub_proto::relay::throttle::Throttle;
use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Failed handshakes from one address within `FAILURE_WINDOW` before it is refused for
/// `FAILURE_WINDOW` (docs/relay-protocol.md "Limits": 5 in 60 s, as v0 acceptors do). A
/// failed handshake is one that presented a proof and was denied (`is_failed_proof`).
pub const MAX_FAILED_HANDSHAKES: u32 = 5;
/// How the relay session's reason begins when it denied a handshake that presented
/// credentials (`relay::session`'s `deny`: a wrong proof, an unknown peer id, a dialect or
/// feature set this peer may not use, a reflected nonce), as opposed to a connection that
/// closed, sent something malformed or let the handshake deadline pass.
pub const DENIED_PREFIX: &str = "handshake denied:";
pub const FAILURE_WINDOW: Duration = Duration::from_secs(60);
/// At most one summed refusal line this often (as the client listener's, `event_loop::accept`).
pub const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(5);
/// Addresses with failed handshakes remembered before the stale ones are swept.
const FAILURE_TABLE_SWEEP: usize = 4096;
/// Descriptors kept for everything that is not a connection: logs, the store and its WAL, the
/// listeners, the poll instance and waker, the signal pipe, /dev/urandom, the EMFILE reserve,
/// hooks' pipes, stdio. Generous: running short of these fails far worse than a refused
/// connection.
pub const RESERVED_DESCRIPTORS: u64 = 64;

/// Log lines one peer can trigger: a burst, then one per period (relay-protocol.md "Limits").
pub const PEER_LOG_BURST: u32 = 20;
pub const PEER_LOG_REFILL: Duration = Duration::from_secs(6);
/// Log lines all connections still in their handshake can trigger together (connection
/// opened, closed before a link, address refused): a burst, then one per period.
pub const STRANGER_LOG_BURST: u32 = 20;
pub const STRANGER_LOG_REFILL: Duration = Duration::from_secs(3);

/// The peer keys, shared by every accepted connection's session instead of a copy each: a
/// connection that never authenticates should cost little.
pub struct SharedKeys(pub Arc<HashMap<String, PeerAuth>>);

impl PeerKeys for SharedKeys {
    fn lookup(&self, peer: &str) -> Option<PeerAuth> {
        self.0.get(peer).cloned()
    }
}

/// Why a connection was refused at accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `max_connections` accepted relay connections are open.
    Total,
    /// `max_unauthenticated` of them have not finished their handshake.
    Unauthenticated,
    /// `max_connections_per_address` are open from this address.
    PerAddress,
    /// The address failed `MAX_FAILED_HANDSHAKES` handshakes within the window.
    FailedHandshakes,
    /// `accept` itself failed for want of descriptors (the connection stays in the backlog).
    NoDescriptors,
}

#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Tally {
    total: u64,
    unauthenticated: u64,
    per_address: u64,
    failed_handshakes: u64,
    no_descriptors: u64,
}

impl Tally {
    fn count(&self) -> u64 {
        self.total
            + self.unauthenticated
            + self.per_address
            + self.failed_handshakes
            + self.no_descriptors
    }
}

#[derive(Debug, Clone, Copy)]
struct Failures {
    count: u32,
    window_start: Instant,
    refused_until: Option<Instant>,
}

/// The books on accepted relay connections.
#[derive(Debug)]
pub struct Gate {
    limits: RelayLimits,
    open: usize,
    unauthenticated: usize,
    per_address: HashMap<IpAddr, usize>,
    failures: HashMap<IpAddr, Failures>,
    tally: Tally,
    /// When the tally now pending began.
    tally_since: Option<Instant>,
    last_logged: Option<Instant>,
}

impl Gate {
    pub fn new(limits: RelayLimits) -> Gate {
        Gate {
            limits,
            open: 0,
            unauthenticated: 0,
            per_address: HashMap::new(),
            failures: HashMap::new(),
            tally: Tally::default(),
            tally_since: None,
            last_logged: None,
        }
    }

    /// A connection from `ip` was accepted: Ok if it may stay (it is then counted open and
    /// unauthenticated until `authenticated`/`closed`); Err if it must be closed at once (the
    /// refusal is tallied).
    pub fn admit(&mut self, ip: IpAddr, now: Instant) -> Result<(), Refusal> {
        let refusal = if self.address_refused(ip, now) {
            Some(Refusal::FailedHandshakes)
        } else if self.per_address.get(&ip).copied().unwrap_or(0)
            >= self.limits.max_connections_per_address
        {
            Some(Refusal::PerAddress)
        } else if self.unauthenticated >= self.limits.max_unauthenticated {
            Some(Refusal::Unauthenticated)
        } else if self.open >= self.limits.max_connections {
            Some(Refusal::Total)
        } else {
            None
        };
        if let Some(r) = refusal {
            self.refused(r, now);
            return Err(r);
        }
        self.open += 1;
        self.unauthenticated += 1;
        *self.per_address.entry(ip).or_insert(0) += 1;
        Ok(())
    }

    /// `accept` failed for want of descriptors.
    pub fn no_descriptors(&mut self, now: Instant) {
        self.refused(Refusal::NoDescriptors, now);
    }

    /// An admitted connection finished its handshake: it no longer holds an unauthenticated
    /// slot.
    pub fn authenticated(&mut self) {
        self.unauthenticated = self.unauthenticated.saturating_sub(1);
    }

    /// An admitted connection closed; `authenticated` says whether `authenticated` was called
    /// for it.
    pub fn closed(&mut self, ip: IpAddr, authenticated: bool) {
        self.open = self.open.saturating_sub(1);
        if !authenticated {
            self.unauthenticated = self.unauthenticated.saturating_sub(1);
        }
        if let Some(n) = self.per_address.get_mut(&ip) {
            *n -= 1;
            if *n == 0 {
                self.per_address.remove(&ip);
            }
        }
    }

    /// An admitted connection from `ip` was denied its handshake (`is_failed_proof`: it
    /// presented a proof; one that merely closed before its link does not come here). The
    /// `MAX_FAILED_HANDSHAKES`th within the window refuses the address; the line saying so is
    /// returned (once per refusal).
    pub fn handshake_failed(&mut self, ip: IpAddr, now: Instant) -> Option<String> {
        let entry = self.failures.entry(ip).or_insert(Failures {
            count: 0,
            window_start: now,
            refused_until: None,
        });
        if now.saturating_duration_since(entry.window_start) > FAILURE_WINDOW {
            *entry = Failures {
                count: 0,
                window_start: now,
                refused_until: None,
            };
        }
        entry.count = entry.count.saturating_add(1);
        let mut line = None;
        if entry.count >= MAX_FAILED_HANDSHAKES && entry.refused_until.is_none() {
            entry.refused_until = now.checked_add(FAILURE_WINDOW);
            line = Some(format!(
                "relay: refusing connections from {ip} for {} s after {MAX_FAILED_HANDSHAKES} failed handshakes",
                FAILURE_WINDOW.as_secs()
            ));
        }
        // Bounded: addresses whose window and refusal are over are forgotten.
        if self.failures.len() > FAILURE_TABLE_SWEEP {
            self.failures.retain(|_, f| {
                f.refused_until.is_some_and(|u| u > now)
                    || now.saturating_duration_since(f.window_start) <= FAILURE_WINDOW
            });
        }
        line
    }

    fn address_refused(&mut self, ip: IpAddr, now: Instant) -> bool {
        match self.failures.get(&ip).and_then(|f| f.refused_until) {
            Some(until) if until > now => true,
            Some(_) => {
                self.failures.remove(&ip);
                false
            }
            None => false,
        }
    }

    fn refused(&mut self, r: Refusal, now: Instant) {
        let t = &mut self.tally;
        let n = match r {
            Refusal::Total => &mut t.total,
            Refusal::Unauthenticated => &mut t.unauthenticated,
            Refusal::PerAddress => &mut t.per_address,
            Refusal::FailedHandshakes => &mut t.failed_handshakes,
            Refusal::NoDescriptors => &mut t.no_descriptors,
        };
        *n = n.saturating_add(1);
        self.tally_since.get_or_insert(now);
    }

    /// When a summed refusal line is next due (None while nothing is tallied).
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.tally.count() == 0 {
            return None;
        }
        match self.last_logged {
            Some(t) => t.checked_add(REFUSAL_LOG_INTERVAL),
            None => self.tally_since,
        }
    }

    /// The summed refusal line, if one is due at `now` (or `force`, at shutdown); the tally
    /// starts again from zero.
    pub fn poll_log(&mut self, now: Instant, force: bool) -> Option<String> {
        let due = self.poll_timeout()?;
        if !force && now < due {
            return None;
        }
        let t = std::mem::take(&mut self.tally);
        let since = self.tally_since.take().unwrap_or(now);
        self.last_logged = Some(now);
        let l = &self.limits;
        let parts: Vec<String> = [
            (
                t.total,
                format!("at max_connections ({})", l.max_connections),
            ),
            (
                t.unauthenticated,
                format!("at max_unauthenticated ({})", l.max_unauthenticated),
            ),
            (
                t.per_address,
                format!(
                    "at max_connections_per_address ({})",
                    l.max_connections_per_address
                ),
            ),
            (
                t.failed_handshakes,
                "from addresses refused after failed handshakes".to_owned(),
            ),
            (t.no_descriptors, "for want of file descriptors".to_owned()),
        ]
        .into_iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, why)| format!("{n} {why}"))
        .collect();
        Some(format!(
            "relay: refused {} connections in the last {} ms: {}",
            t.count(),
            now.saturating_duration_since(since).as_millis(),
            parts.join(", ")
        ))
    }

    /// Accepted connections open now.
    pub fn open(&self) -> usize {
        self.open
    }

    /// Accepted connections open now that have not finished their handshake.
    pub fn unauthenticated(&self) -> usize {
        self.unauthenticated
    }
}

/// `check_descriptors` refused: the connections configured need more descriptors than the
/// process may hold. Carries the terms of the sum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorError {
    pub client_connections: usize,
    pub relay_connections: usize,
    pub dials: usize,
    pub needed: u64,
    pub nofile: u64,
}

impl std::fmt::Display for DescriptorError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let DescriptorError {
            client_connections,
            relay_connections,
            dials,
            needed,
            nofile,
        } = self;
        write!(
            f,
            "limits.max_connections ({client_connections}) + relay.max_connections ({relay_connections}) + {dials} dialled peers + {RESERVED_DESCRIPTORS} reserved = {needed} file descriptors, over this process's limit of {nofile}: lower one of the two caps, or raise the limit (ulimit -n)"
        )
    }
}

impl std::error::Error for DescriptorError {}

/// The rule that keeps a flood of relay connections from taking the descriptors local clients
/// need: client connections (`limits.max_connections`), accepted relay connections
/// (`relay.max_connections`), one dial per configured peer and `RESERVED_DESCRIPTORS` must fit
/// in the descriptor limit (`RLIMIT_NOFILE`, after startup raised it to its hard limit). The
/// relay refuses connections past its own cap, so it can never hold more than its share.
pub fn check_descriptors(
    client_connections: usize,
    relay: &RelayLimits,
    dials: usize,
    nofile: u64,
) -> Result<(), DescriptorError> {
    let needed = (client_connections as u64)
        .saturating_add(relay.max_connections as u64)
        .saturating_add(dials as u64)
        .saturating_add(RESERVED_DESCRIPTORS);
    if needed > nofile {
        return Err(DescriptorError {
            client_connections,
            relay_connections: relay.max_connections,
            dials,
            needed,
            nofile,
        });
    }
    Ok(())
}

/// Whether a connection that closed before its link, with the session's `reason`, counts as a
/// failed handshake toward its address's lockout (docs/relay-protocol.md §2.4): only a
/// denial, which a handshake carrying a proof gets. Bare connections that close, garbage and
/// missed deadlines do not count (issue 29: five connect-and-close from a peer's address used
/// to lock that peer out for a minute); the caps on strangers still bound them.
pub fn is_failed_proof(reason: &str) -> bool {
    reason.starts_with(DENIED_PREFIX)
}

/// The process's descriptor limit (the soft `RLIMIT_NOFILE`), or None if it cannot be read.
pub fn nofile_limit() -> Option<u64> {
    // SAFETY: getrlimit writes into a local rlimit struct we own, valid for the call.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        (libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0).then_some(lim.rlim_cur as u64)
    }
}

/// Pushes a line a peer triggered, unless its throttle holds it back; the next line that
/// passes says how many were held back.
pub fn throttled(
    logs: &mut Vec<(&'static str, String)>,
    throttle: &mut Throttle,
    level: &'static str,
    line: String,
    now: Instant,
) {
    match throttle.admit(now) {
        None => {}
        Some(0) => logs.push((level, line)),
        Some(n) => logs.push((
            level,
            format!("{line} ({n} earlier lines like it held back by the log rate limit)"),
        )),
    }
}

/// `accept` failed because descriptors ran out (the process's, the system's, or the kernel's
/// socket memory).
pub fn is_fd_exhaustion(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EMFILE) | Some(libc::ENFILE) | Some(libc::ENOBUFS) | Some(libc::ENOMEM)
    )
}

/// What a session dropped from its peer, for the line saying its link is down ("" if nothing).
pub fn dropped_summary(st: &SessionStats) -> String {
    let dropped: Vec<String> = [
        (st.beats_over_rate, "heartbeats over the rate"),
        (st.unknown_dropped, "messages of unknown types"),
        (st.invalid_dropped, "invalid payloads"),
        (st.duplicates_dropped, "duplicates"),
    ]
    .into_iter()
    .filter(|(n, _)| *n > 0)
    .map(|(n, what)| format!("{n} {what}"))
    .collect();
    if dropped.is_empty() {
        String::new()
    } else {
        format!(" (dropped from it: {})", dropped.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(total: usize, unauth: usize, per_addr: usize) -> RelayLimits {
        RelayLimits {
            max_connections: total,
            max_unauthenticated: unauth,
            max_connections_per_address: per_addr,
            ..RelayLimits::default()
        }
    }

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    #[test]
    fn each_cap_refuses_past_it_and_frees_its_slot_on_close() {
        let t0 = Instant::now();
        let mut g = Gate::new(limits(4, 3, 2));
        // Per address: the third from one address is refused, open or not authenticated.
        assert_eq!(g.admit(ip(1), t0), Ok(()));
        assert_eq!(g.admit(ip(1), t0), Ok(()));
        assert_eq!(g.admit(ip(1), t0), Err(Refusal::PerAddress));
        // Unauthenticated: three in their handshake at once.
        assert_eq!(g.admit(ip(2), t0), Ok(()));
        assert_eq!(g.admit(ip(3), t0), Err(Refusal::Unauthenticated));
        assert_eq!((g.open(), g.unauthenticated()), (3, 3));
        // Two finish their handshake: they still count open, and per address.
        g.authenticated();
        g.authenticated();
        assert_eq!(g.admit(ip(1), t0), Err(Refusal::PerAddress));
        assert_eq!(g.admit(ip(3), t0), Ok(()));
        assert_eq!((g.open(), g.unauthenticated()), (4, 2));
        // Total: four open.
        assert_eq!(g.admit(ip(4), t0), Err(Refusal::Total));
        // Closing frees each slot it held.
        g.closed(ip(1), true);
        assert_eq!((g.open(), g.unauthenticated()), (3, 2));
        assert_eq!(g.admit(ip(1), t0), Ok(()));
        g.closed(ip(2), false);
        g.closed(ip(3), false);
        assert_eq!((g.open(), g.unauthenticated()), (2, 1));
        assert_eq!(
            g.per_address.get(&ip(2)),
            None,
            "an address with none open is forgotten"
        );
        assert_eq!(g.admit(ip(4), t0), Ok(()));
    }

    #[test]
    fn five_failed_handshakes_refuse_an_address_for_the_window() {
        let t0 = Instant::now();
        let mut g = Gate::new(RelayLimits::default());
        for i in 0..4 {
            assert_eq!(g.admit(ip(9), t0), Ok(()));
            g.closed(ip(9), false);
            assert_eq!(g.handshake_failed(ip(9), t0), None, "failure {i}");
        }
        assert_eq!(g.admit(ip(9), t0), Ok(()));
        g.closed(ip(9), false);
        let line = g.handshake_failed(ip(9), t0).expect("the fifth refuses");
        assert!(
            line.contains("refusing connections from 10.0.0.9 for 60 s"),
            "{line}"
        );
        assert_eq!(g.admit(ip(9), t0), Err(Refusal::FailedHandshakes));
        assert_eq!(
            g.admit(ip(8), t0),
            Ok(()),
            "other addresses are not refused"
        );
        let end = t0 + FAILURE_WINDOW;
        assert_eq!(
            g.admit(ip(9), end - Duration::from_millis(1)),
            Err(Refusal::FailedHandshakes)
        );
        assert_eq!(g.admit(ip(9), end), Ok(()));
        // Failures spread wider than the window never add up to a refusal.
        let mut g = Gate::new(RelayLimits::default());
        for i in 0..20u32 {
            let now = t0 + (FAILURE_WINDOW / 4 + Duration::from_millis(1)) * i;
            assert_eq!(g.handshake_failed(ip(7), now), None, "failure {i}");
        }
    }

    #[test]
    fn the_failure_table_stays_bounded() {
        let t0 = Instant::now();
        let mut g = Gate::new(RelayLimits::default());
        for i in 0..100_000u32 {
            let ip = IpAddr::from(std::net::Ipv4Addr::from(i));
            let now = t0 + FAILURE_WINDOW * 2 * (i / 1000);
            g.handshake_failed(ip, now);
        }
        assert!(
            g.failures.len() <= FAILURE_TABLE_SWEEP + 1,
            "{}",
            g.failures.len()
        );
    }

    #[test]
    fn refusals_are_summed_into_one_line_per_interval() {
        let t0 = Instant::now();
        let mut g = Gate::new(limits(2, 2, 1));
        assert_eq!(g.poll_timeout(), None);
        assert_eq!(g.admit(ip(1), t0), Ok(()));
        // A flood: 10,000 refusals over 20 s of virtual time, one every 2 ms.
        let mut lines = Vec::new();
        for i in 0..10_000u32 {
            let now = t0 + Duration::from_millis(2) * i;
            assert_eq!(g.admit(ip(1), now), Err(Refusal::PerAddress));
            if let Some(l) = g.poll_log(now, false) {
                lines.push(l);
            }
        }
        // The first at once, then one per interval: 0, 5, 10, 15 s.
        assert_eq!(lines.len(), 4, "{lines:#?}");
        assert!(lines[0].starts_with("relay: refused 1 connections in the last 0 ms: 1 at max_connections_per_address (1)"), "{}", lines[0]);
        assert!(
            lines[1].starts_with("relay: refused 2500 connections"),
            "{}",
            lines[1]
        );
        // The rest is due an interval after the last line, and then the tally is empty.
        let end = t0 + Duration::from_millis(2) * 9_999;
        let due = g.poll_timeout().unwrap();
        assert_eq!(due, t0 + REFUSAL_LOG_INTERVAL * 4);
        assert!(due > end);
        assert_eq!(g.poll_log(end, false), None);
        let last = g.poll_log(due, false).unwrap();
        let total: u64 = lines
            .iter()
            .chain([&last])
            .map(|l| {
                l["relay: refused ".len()..]
                    .split(' ')
                    .next()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
            })
            .sum();
        assert_eq!(total, 10_000, "every refusal counted once");
        assert_eq!(g.poll_timeout(), None);
        // Several reasons in one line; a forced line at shutdown.
        g.no_descriptors(due);
        assert_eq!(g.admit(ip(2), due), Ok(()));
        assert_eq!(g.admit(ip(3), due), Err(Refusal::Unauthenticated));
        let l = g.poll_log(due, true).unwrap();
        assert!(
            l.contains("1 at max_unauthenticated (2), 1 for want of file descriptors"),
            "{l}"
        );
    }

    #[test]
    fn relay_and_client_connections_must_fit_the_descriptor_limit() {
        let relay = limits(64, 16, 8);
        assert_eq!(
            check_descriptors(1024, &relay, 2, 1024 + 64 + 2 + 64),
            Ok(())
        );
        let e = check_descriptors(1024, &relay, 2, 1024 + 64 + 2 + 63)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("1154 file descriptors, over this process's limit of 1153"),
            "{e}"
        );
        assert!(
            e.contains("limits.max_connections (1024) + relay.max_connections (64)"),
            "{e}"
        );
        assert!(nofile_limit().is_some_and(|n| n > 0));
    }

    /// What counts toward the lockout is decided on the session's own reasons: driven here
    /// through real sessions, so a change of the session's wording that would stop wrong
    /// proofs counting (or make bare closes count) fails this test (issue 29).
    #[test]
    fn only_a_denied_proof_counts_as_a_failed_handshake() {
        use agent_hub_proto::relay::session::{
            PeerAuth, Session, SessionConfig, SessionEvent, WallClock,
        };
        let t0 = std::time::Instant::now();
        let cfg = |me: &str| {
            SessionConfig::new(
                me,
                "0.1.0",
                WallClock {
                    at: t0,
                    unix_ms: 1_700_000_000_000,
                },
            )
        };
        let auth = |key: u8, allow_claudectl: bool| PeerAuth {
            key: [key; 32],
            allow_claudectl,
            forward: false,
        };
        let acceptor = |allow_claudectl: bool| {
            let keys = HashMap::from([("west".to_owned(), auth(1, allow_claudectl))]);
            Session::acceptor(cfg("east"), keys, [2; 32], 2, t0)
        };
        let reason = |s: &mut Session| {
            std::iter::from_fn(|| s.poll_event())
                .find_map(|e| match e {
                    SessionEvent::Closed { reason } => Some(reason),
                    _ => None,
                })
                .expect("the session closed")
        };
        // A dialler presenting credentials: pump until the acceptor has decided.
        let dial = |as_peer: &str, key: u8, allow_claudectl: bool| {
            let mut listen = acceptor(false);
            let mut d = Session::dialer(
                cfg(as_peer),
                "east",
                auth(key, allow_claudectl),
                [3; 32],
                1,
                t0,
            );
            for _ in 0..4 {
                while let Some(b) = listen.poll_transmit() {
                    d.handle_input(&b, t0);
                }
                while let Some(b) = d.poll_transmit() {
                    listen.handle_input(&b, t0);
                }
            }
            reason(&mut listen)
        };
        for (what, why) in [
            ("a wrong key", dial("west", 9, false)),
            ("an unknown peer id", dial("mallory", 1, false)),
        ] {
            assert!(why.starts_with(DENIED_PREFIX), "{what}: {why}");
            assert!(is_failed_proof(&why), "{what}: {why}");
        }
        // Connections that presented no proof.
        let mut bare = acceptor(false);
        bare.handle_eof();
        let mut garbage = acceptor(false);
        garbage.handle_input(b"GET / HTTP/1.1\r\n\r\n", t0);
        let mut slow = acceptor(false);
        slow.handle_timeout(t0 + Duration::from_secs(3600));
        for (what, mut s) in [
            ("a bare close", bare),
            ("garbage", garbage),
            ("the deadline", slow),
        ] {
            let why = reason(&mut s);
            assert!(!is_failed_proof(&why), "{what}: {why}");
        }
        assert!(!is_failed_proof("peer closed the connection"));
        assert!(!is_failed_proof("read failed: connection reset by peer"));
    }
}
