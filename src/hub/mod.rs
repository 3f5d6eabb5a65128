//! The sans-IO hub core (SPEC §4–§5): each connection's protocol state (hello → ok → one
//! verb → one reply), authentication, routing through the `Router`, deadlines as data, the
//! staging of sends until their audit record is written, delivery outcomes and bounces.
//!
//! Inputs are `handle_*` with the time passed in; outputs are drained with `poll_output`; the
//! next deadline is `poll_timeout`. Refuses: sockets, files, clocks, threads. The mio loop in
//! `server` only moves bytes and applies outputs.

pub mod event;
pub mod router;

pub use event::{AuditEvent, Output};
pub use router::{Filter, MailboxStats, Parked, Queued, Router};

use crate::config::Limits;
use crate::roster::{Roster, HUB_NAME};
use crate::wire::{AwaitRequest, ClientLine, Envelope, HubLine};
use chrono::{DateTime, SecondsFormat, Utc};
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A connection as the core knows it: an opaque number the IO layer picks.
pub type ConnId = u64;

/// The time, passed in: `mono` drives deadlines; `wall` only stamps the `ts` of bounces.
#[derive(Debug, Clone, Copy)]
pub struct Now {
    pub mono: Instant,
    pub wall: DateTime<Utc>,
}

/// Where a staged send goes once committed.
#[derive(Debug)]
enum Target {
    /// A waiter claimed at staging time (still `Phase::Claimed` unless it went away).
    Waiter(ConnId),
    /// The queue; `reserved` says whether cap room was reserved (bounces waive the caps).
    Queue { reserved: bool },
}

#[derive(Debug)]
struct Staged {
    /// The sender's connection; None for the hub's own bounces.
    conn: Option<ConnId>,
    env: Queued,
    target: Target,
}

#[derive(Debug)]
enum Phase {
    /// Waiting for the hello line.
    Hello,
    /// Authenticated; waiting for the verb line.
    Verb,
    /// A send is staged; `accepted` goes out after the commit.
    Staged,
    /// A parked await; `deadline` None waits forever.
    Parked { parked: Parked, deadline: Option<Instant> },
    /// A parked await that a staged send has claimed; the deadline is suspended.
    Claimed { parked: Parked, deadline: Option<Instant> },
    /// A delivery line is out; `committed` once the socket accepted its first byte.
    Delivering { env: Queued, committed: bool },
    /// The final line is queued and Close emitted; waiting for `handle_closed`.
    Done,
}

#[derive(Debug)]
struct Conn {
    phase: Phase,
    name: Option<String>,
    /// The verb, for the service log.
    verb: &'static str,
    opened: Instant,
    /// The deadline registered in `Hub::deadlines` for this connection, if any.
    deadline: Option<Instant>,
    /// The peer sent EOF: nothing more will arrive.
    eof: bool,
}

/// The hub core. One per server; every method is synchronous and cheap.
#[derive(Debug)]
pub struct Hub {
    roster: Roster,
    limits: Limits,
    router: Router,
    conns: HashMap<ConnId, Conn>,
    deadlines: BTreeSet<(Instant, ConnId)>,
    staged: Vec<Staged>,
    outputs: VecDeque<Output>,
    shutting_down: bool,
    /// The next acceptance number (`Queued::seq`).
    next_seq: u64,
}

impl Hub {
    pub fn new(roster: Roster, limits: Limits) -> Hub {
        let router = Router::new(limits.queue_max_envelopes, limits.queue_max_bytes).with_total_cap(limits.hub_max_bytes);
        Hub {
            roster,
            limits,
            router,
            conns: HashMap::new(),
            deadlines: BTreeSet::new(),
            staged: Vec::new(),
            outputs: VecDeque::new(),
            shutting_down: false,
            next_seq: 0,
        }
    }

    // ----- inputs -----

    /// A connection was accepted; the hello deadline starts now.
    pub fn handle_connect(&mut self, conn: ConnId, now: Now) {
        self.conns.insert(
            conn,
            Conn { phase: Phase::Hello, name: None, verb: "-", opened: now.mono, deadline: None, eof: false },
        );
        self.set_deadline(conn, Some(now.mono + self.limits.hello_timeout()));
        self.outputs.push_back(Output::Audit(AuditEvent::Connected { conn }));
        if self.shutting_down {
            self.fail(conn, "hub is shutting down", now);
        }
    }

    /// One complete line from the peer, without its `\n`.
    pub fn handle_line(&mut self, conn: ConnId, line: &[u8], now: Now) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return; // blank lines carry nothing (SPEC §2.1)
        }
        let Some(c) = self.conns.get(&conn) else { return };
        match c.phase {
            Phase::Hello => self.on_hello_line(conn, line, now),
            Phase::Verb => self.on_verb_line(conn, line, now),
            Phase::Staged | Phase::Parked { .. } | Phase::Claimed { .. } => {
                self.cancel_verb(conn, "a second line after the verb: one verb per connection; nothing was queued or consumed", now)
            }
            // The reply is already out; anything more is discarded while the socket closes.
            Phase::Delivering { .. } | Phase::Done => {}
        }
    }

    /// The peer sent a line longer than the cap (or other undecodable input).
    pub fn handle_bad_input(&mut self, conn: ConnId, message: &str, now: Now) {
        if let Some(c) = self.conns.get(&conn) {
            if !matches!(c.phase, Phase::Delivering { .. } | Phase::Done) {
                self.cancel_verb(conn, message, now);
            }
        }
    }

    /// The peer closed its sending side. A parked await is dropped at once (SPEC §5.4); a send
    /// still gets its reply.
    pub fn handle_eof(&mut self, conn: ConnId, now: Now) {
        let Some(c) = self.conns.get_mut(&conn) else { return };
        c.eof = true;
        match &c.phase {
            Phase::Hello | Phase::Verb => {
                self.log(conn, "closed", "peer closed before its verb", now);
                self.finish(conn);
            }
            Phase::Parked { parked, .. } => {
                let parked = parked.clone();
                self.router.unpark(&parked);
                self.log(conn, "dropped", "parked await's peer closed; nothing consumed", now);
                self.finish(conn);
            }
            Phase::Claimed { .. } => {
                // The staged envelope is routed elsewhere at commit (see `commit`).
                self.log(conn, "dropped", "claimed await's peer closed; the envelope is routed on", now);
                self.finish(conn);
            }
            Phase::Staged | Phase::Delivering { .. } | Phase::Done => {}
        }
    }

    /// The IO layer released the socket. `flushed` says whether everything written to it was
    /// accepted by the kernel. Every connection ends with exactly one call.
    pub fn handle_closed(&mut self, conn: ConnId, flushed: bool, reason: &str, now: Now) {
        self.set_deadline(conn, None);
        let Some(mut c) = self.conns.remove(&conn) else { return };
        match std::mem::replace(&mut c.phase, Phase::Done) {
            Phase::Parked { parked, .. } => {
                self.router.unpark(&parked);
                self.log_conn(&c, conn, "dropped", reason, now);
            }
            Phase::Staged => {
                // The sender never saw `accepted`, so the send must not happen.
                if let Some(pos) = self.staged.iter().position(|s| s.conn == Some(conn)) {
                    let s = self.staged.remove(pos);
                    self.unstage(s, &format!("sender went away before the commit: {reason}"), now);
                }
                self.log_conn(&c, conn, "cancelled", reason, now);
            }
            Phase::Delivering { env, committed: false } => {
                self.outputs.push_back(Output::Audit(AuditEvent::Requeued {
                    conn,
                    id: env.id.clone(),
                    to: env.to.clone(),
                    reason: reason.to_owned(),
                }));
                self.log_conn(&c, conn, "requeued", reason, now);
                self.route(env, true, now);
            }
            Phase::Delivering { env, committed: true } if !flushed => {
                self.log_conn(&c, conn, "lost", reason, now);
                self.lose(conn, env, reason, now);
            }
            Phase::Delivering { .. } => self.log_conn(&c, conn, "delivered", "", now),
            Phase::Hello | Phase::Verb | Phase::Claimed { .. } | Phase::Done => {}
        }
    }

    /// The socket accepted the first byte of the delivery: the envelope is consumed (SPEC §5.3).
    pub fn handle_delivery_committed(&mut self, conn: ConnId) {
        if let Some(Conn { phase: Phase::Delivering { env, committed }, .. }) = self.conns.get_mut(&conn) {
            if !*committed {
                *committed = true;
                let ev = AuditEvent::Delivered { conn, id: env.id.clone(), to: env.to.clone() };
                self.outputs.push_back(Output::Audit(ev));
            }
        }
    }

    /// Expires every deadline at or before `now`.
    pub fn handle_timeout(&mut self, now: Now) {
        while let Some(&(at, conn)) = self.deadlines.first() {
            if at > now.mono {
                break;
            }
            self.deadlines.remove(&(at, conn));
            let Some(c) = self.conns.get_mut(&conn) else { continue };
            c.deadline = None;
            match &c.phase {
                Phase::Hello => {
                    let msg = format!("no hello within {} ms", self.limits.hello_timeout_ms);
                    self.fail(conn, &msg, now);
                }
                Phase::Verb => {
                    let msg = format!("no verb within {} ms", self.limits.verb_timeout_ms);
                    self.fail(conn, &msg, now);
                }
                Phase::Parked { parked, .. } => {
                    let parked = parked.clone();
                    self.router.unpark(&parked);
                    let name = parked.agent;
                    self.outputs.push_back(Output::Audit(AuditEvent::Timeout { conn, name }));
                    self.reply(conn, &HubLine::Timeout, "timeout", now);
                }
                _ => {}
            }
        }
    }

    /// Begins a clean shutdown: every connection not waiting on a commit or a delivery gets an
    /// error line and is closed; parked awaits consume nothing.
    pub fn shutdown(&mut self, now: Now) {
        self.shutting_down = true;
        let ids: Vec<ConnId> = self.conns.keys().copied().collect();
        for conn in ids {
            let phase = &self.conns[&conn].phase;
            match phase {
                Phase::Hello | Phase::Verb => self.fail(conn, "hub is shutting down", now),
                Phase::Parked { parked, .. } => {
                    let parked = parked.clone();
                    self.router.unpark(&parked);
                    self.fail(conn, "hub is shutting down; nothing was consumed", now);
                }
                _ => {}
            }
        }
        let queued = self.router.total_queued();
        self.outputs.push_back(Output::Audit(AuditEvent::Shutdown { queued }));
    }

    // ----- staging and commit (SPEC §5.1, §8) -----

    /// The audit records of the sends staged since the last commit, in order. The IO layer
    /// writes them (with the other pending records) and then calls `commit`.
    pub fn staged_audit(&self) -> impl Iterator<Item = AuditEvent> + '_ {
        self.staged.iter().map(|s| AuditEvent::Accepted { conn: s.conn, envelope: s.env.text.clone() })
    }

    pub fn has_staged(&self) -> bool {
        !self.staged.is_empty()
    }

    /// Settles every staged send: on `Ok` they are accepted and routed; on `Err` (the audit
    /// write failed) each sender gets an error line and nothing is queued. Bounces stay staged
    /// on failure and are tried again with the next commit, so none is dropped.
    pub fn commit(&mut self, result: Result<(), String>, now: Now) {
        let staged = std::mem::take(&mut self.staged);
        for s in staged {
            match &result {
                Ok(()) => self.accept(s, now),
                Err(_) if s.conn.is_none() => self.staged.push(s),
                Err(why) => {
                    let msg = format!("envelope not accepted: the audit log could not be written ({why})");
                    let conn = s.conn;
                    self.unstage(s, &msg, now);
                    if let Some(conn) = conn {
                        self.fail(conn, &msg, now);
                    }
                }
            }
        }
    }

    // ----- outputs -----

    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// The earliest deadline the core holds; the IO loop must call `handle_timeout` by then.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadlines.first().map(|&(at, _)| at)
    }

    /// Queue and waiter counts for one agent.
    pub fn stats(&self, agent: &str) -> MailboxStats {
        self.router.stats(agent)
    }

    pub fn router(&self) -> &Router {
        &self.router
    }

    /// Connections the core still tracks.
    pub fn open_connections(&self) -> usize {
        self.conns.len()
    }

    // ----- line handlers -----

    fn on_hello_line(&mut self, conn: ConnId, line: &[u8], now: Now) {
        match ClientLine::decode(line) {
            Err(e) => self.fail(conn, &e.to_string(), now),
            Ok(ClientLine::Hello(h)) => {
                if self.roster.verify(&h.name, &h.token) {
                    let c = self.conns.get_mut(&conn).expect("caller checked the connection exists");
                    c.name = Some(h.name.clone());
                    c.phase = Phase::Verb;
                    self.set_deadline(conn, Some(now.mono + self.limits.verb_timeout()));
                    self.outputs.push_back(Output::Audit(AuditEvent::Authenticated { conn, name: h.name }));
                    self.write(conn, &HubLine::Ok);
                } else {
                    self.outputs.push_back(Output::Audit(AuditEvent::AuthFailed { conn, name: h.name }));
                    self.fail(conn, "authentication failed: unknown name or wrong token", now);
                }
            }
            Ok(other) => {
                let msg = format!("expected hello as the first line, got {}", other.tag());
                self.fail(conn, &msg, now)
            }
        }
    }

    fn on_verb_line(&mut self, conn: ConnId, line: &[u8], now: Now) {
        match ClientLine::decode(line) {
            Err(e) => self.fail(conn, &e.to_string(), now),
            Ok(ClientLine::Hello(_)) => self.fail(conn, "a second hello on one connection", now),
            Ok(ClientLine::Send(env)) => {
                self.conns.get_mut(&conn).expect("caller checked").verb = "send";
                self.on_send(conn, env, now)
            }
            Ok(ClientLine::Await(req)) => {
                self.conns.get_mut(&conn).expect("caller checked").verb = "await";
                self.on_await(conn, req, now)
            }
        }
    }

    fn on_send(&mut self, conn: ConnId, mut env: Envelope, now: Now) {
        let name = self.conns[&conn].name.clone().expect("verb phase is authenticated");
        if env.kind == Envelope::BOUNCE_KIND {
            return self.fail(conn, "invalid envelope: kind \"bounce\" is reserved for the hub", now);
        }
        if env.to.eq_ignore_ascii_case(HUB_NAME) {
            // Nobody can authenticate as the hub, so such an envelope could only pile up.
            return self.fail(conn, "invalid envelope: to \"hub\" names the hub itself, which receives nothing", now);
        }
        env.from = name;
        let queued = queued_from(&env);
        self.set_deadline(conn, None);
        let target = match self.router.claim_waiter(&queued) {
            Some((waiter, parked)) => {
                let w = self.conns.get_mut(&waiter).expect("parked waiters are live connections");
                let Phase::Parked { deadline, .. } = w.phase else { unreachable!("router waiters are parked") };
                w.phase = Phase::Claimed { parked, deadline };
                self.set_deadline(waiter, None);
                Target::Waiter(waiter)
            }
            None => match self.router.reserve(&queued.to, queued.size_bytes()) {
                Ok(()) => Target::Queue { reserved: true },
                Err(full) => {
                    let reason = full.to_string();
                    self.outputs.push_back(Output::Audit(AuditEvent::Refused { conn, id: queued.id, reason: reason.clone() }));
                    return self.fail(conn, &reason, now);
                }
            },
        };
        self.conns.get_mut(&conn).expect("caller checked").phase = Phase::Staged;
        self.staged.push(Staged { conn: Some(conn), env: queued, target });
    }

    fn on_await(&mut self, conn: ConnId, req: AwaitRequest, now: Now) {
        let name = self.conns[&conn].name.clone().expect("verb phase is authenticated");
        let filter = Filter { reply_to: req.reply_to, kind: req.kind };
        if let Some(env) = self.router.take_first_match(&name, &filter) {
            return self.deliver(conn, env, now);
        }
        match req.timeout_secs {
            Some(0) => {
                self.outputs.push_back(Output::Audit(AuditEvent::Timeout { conn, name }));
                self.reply(conn, &HubLine::Timeout, "timeout", now);
            }
            secs => {
                // A timeout too far away to represent waits forever.
                let deadline = secs.and_then(|s| now.mono.checked_add(Duration::from_secs(s)));
                let parked = self.router.park(&name, filter, conn);
                self.conns.get_mut(&conn).expect("caller checked").phase = Phase::Parked { parked, deadline };
                self.set_deadline(conn, deadline);
            }
        }
    }

    // ----- routing -----

    fn accept(&mut self, mut s: Staged, now: Now) {
        s.env.seq = self.next_seq;
        self.next_seq += 1;
        if let Some(conn) = s.conn {
            let line = HubLine::Accepted { id: s.env.id.clone() };
            self.reply(conn, &line, "accepted", now);
        }
        match s.target {
            Target::Waiter(waiter) => match self.conns.get(&waiter).map(|c| (&c.phase, c.eof)) {
                Some((Phase::Claimed { .. }, false)) => self.deliver(waiter, s.env, now),
                // The claimed waiter went away meanwhile: route as if it had never parked.
                _ => self.route(s.env, false, now),
            },
            Target::Queue { reserved } => {
                if reserved {
                    self.router.release(&s.env.to, s.env.size_bytes());
                }
                self.route(s.env, false, now);
            }
        }
    }

    /// Reverses a staging: frees its reservation or re-parks its claimed waiter in place.
    fn unstage(&mut self, s: Staged, reason: &str, now: Now) {
        match s.target {
            Target::Queue { reserved: true } => self.router.release(&s.env.to, s.env.size_bytes()),
            Target::Queue { reserved: false } => {}
            Target::Waiter(waiter) => self.unclaim(waiter, now),
        }
        if let Some(conn) = s.conn {
            let reason = reason.to_owned();
            self.outputs.push_back(Output::Audit(AuditEvent::Refused { conn, id: s.env.id, reason }));
        }
    }

    /// A claimed waiter whose envelope did not come goes back to its place in its tier.
    fn unclaim(&mut self, waiter: ConnId, now: Now) {
        let Some(c) = self.conns.get_mut(&waiter) else { return };
        let Phase::Claimed { parked, deadline } = std::mem::replace(&mut c.phase, Phase::Done) else {
            return;
        };
        if c.eof {
            return; // already finished in handle_eof
        }
        self.router.repark(&parked, waiter);
        c.phase = Phase::Parked { parked, deadline };
        self.set_deadline(waiter, deadline);
        if deadline.is_some_and(|d| d <= now.mono) {
            self.handle_timeout(now);
        }
    }

    /// Hands an accepted envelope to the best waiter, else queues it (a returned envelope back
    /// in its acceptance place, ahead of newer ones; a new one at the back). Caps are not
    /// checked here: the envelope is already accepted, and refusing it now would lose it.
    fn route(&mut self, env: Queued, returned: bool, now: Now) {
        match self.router.claim_waiter(&env) {
            Some((waiter, _)) => self.deliver(waiter, env, now),
            None if returned => self.router.requeue(env),
            None => self.router.enqueue_back(env),
        }
    }

    fn deliver(&mut self, conn: ConnId, env: Queued, now: Now) {
        self.set_deadline(conn, None);
        let line = HubLine::Envelope(env.text.to_string()).encode();
        let c = self.conns.get_mut(&conn).expect("deliver targets a live connection");
        c.phase = Phase::Delivering { env, committed: false };
        let _ = now;
        self.outputs.push_back(Output::Deliver { conn, line });
        self.outputs.push_back(Output::Close { conn });
    }

    /// A committed delivery was cut short: audit the loss and bounce it to its sender.
    fn lose(&mut self, conn: ConnId, env: Queued, reason: &str, now: Now) {
        let bounced = env.kind != Envelope::BOUNCE_KIND;
        self.outputs.push_back(Output::Audit(AuditEvent::Lost {
            conn,
            id: env.id.clone(),
            to: env.to.clone(),
            reason: reason.to_owned(),
            bounced,
        }));
        if !bounced {
            return; // a lost bounce is not bounced again
        }
        let body = format!(
            "{{\"id\":{},\"to\":{},\"reason\":{}}}",
            crate::wire::to_json(&env.id),
            crate::wire::to_json(&env.to),
            crate::wire::to_json(reason)
        );
        let bounce = Envelope::new(
            uuid::Uuid::new_v4().to_string(),
            HUB_NAME.to_owned(),
            env.from.clone(),
            now.wall.to_rfc3339_opts(SecondsFormat::Millis, true),
            Envelope::BOUNCE_KIND.to_owned(),
            Some(env.id.clone()),
            body,
        )
        .expect("the bounce body is built from JSON strings");
        self.staged.push(Staged { conn: None, env: queued_from(&bounce), target: Target::Queue { reserved: false } });
    }

    // ----- replies and bookkeeping -----

    fn write(&mut self, conn: ConnId, line: &HubLine) {
        self.outputs.push_back(Output::Write { conn, line: line.encode() });
    }

    /// Sends the connection's final line and closes it.
    fn reply(&mut self, conn: ConnId, line: &HubLine, outcome: &str, now: Now) {
        self.write(conn, line);
        self.log(conn, outcome, "", now);
        self.finish(conn);
    }

    /// Sends an error line (always the last line) and closes.
    fn fail(&mut self, conn: ConnId, message: &str, now: Now) {
        self.write(conn, &HubLine::Error { message: message.to_owned() });
        self.log(conn, "error", message, now);
        self.finish(conn);
    }

    /// Undoes whatever the verb set in motion, then fails the connection with `message`.
    fn cancel_verb(&mut self, conn: ConnId, message: &str, now: Now) {
        let phase = std::mem::replace(&mut self.conns.get_mut(&conn).expect("caller checked").phase, Phase::Done);
        match phase {
            Phase::Staged => {
                if let Some(pos) = self.staged.iter().position(|s| s.conn == Some(conn)) {
                    let s = self.staged.remove(pos);
                    self.unstage(s, message, now);
                }
            }
            Phase::Parked { parked, .. } => {
                self.router.unpark(&parked);
            }
            // Leaving the phase as Done makes `accept` route the envelope elsewhere.
            Phase::Claimed { .. } => {}
            other => self.conns.get_mut(&conn).expect("caller checked").phase = other,
        }
        self.fail(conn, message, now);
    }

    fn finish(&mut self, conn: ConnId) {
        self.set_deadline(conn, None);
        if let Some(c) = self.conns.get_mut(&conn) {
            // A claimed waiter becomes Done too: once closed it must take no more input, and
            // `accept` routes the envelope of a waiter that is no longer Claimed elsewhere.
            if !matches!(c.phase, Phase::Delivering { .. }) {
                c.phase = Phase::Done;
            }
        }
        self.outputs.push_back(Output::Close { conn });
    }

    fn set_deadline(&mut self, conn: ConnId, deadline: Option<Instant>) {
        let Some(c) = self.conns.get_mut(&conn) else { return };
        if let Some(old) = c.deadline.take() {
            self.deadlines.remove(&(old, conn));
        }
        if let Some(at) = deadline {
            c.deadline = Some(at);
            self.deadlines.insert((at, conn));
        }
    }

    fn log(&mut self, conn: ConnId, outcome: &str, detail: &str, now: Now) {
        if let Some(c) = self.conns.get(&conn) {
            let line = service_line(c, conn, outcome, detail, now);
            self.outputs.push_back(Output::Log(line));
        }
    }

    fn log_conn(&mut self, c: &Conn, conn: ConnId, outcome: &str, detail: &str, now: Now) {
        let line = service_line(c, conn, outcome, detail, now);
        self.outputs.push_back(Output::Log(line));
    }
}

fn service_line(c: &Conn, conn: ConnId, outcome: &str, detail: &str, now: Now) -> String {
    let elapsed_us = now.mono.saturating_duration_since(c.opened).as_micros();
    let name = c.name.as_deref().unwrap_or("-");
    if detail.is_empty() {
        format!("conn={conn} name={name} verb={} outcome={outcome} elapsed_us={elapsed_us}", c.verb)
    } else {
        format!(
            "conn={conn} name={name} verb={} outcome={outcome} elapsed_us={elapsed_us} detail={:?}",
            c.verb, detail
        )
    }
}

/// The router's form of an envelope: routing fields plus the canonical text.
fn queued_from(env: &Envelope) -> Queued {
    Queued {
        id: env.id.clone(),
        from: env.from.clone(),
        to: env.to.clone(),
        kind: env.kind.clone(),
        correlation_id: env.correlation_id.clone(),
        text: Arc::from(env.to_json()),
        seq: 0, // stamped in `accept`
    }
}

#[cfg(test)]
mod tests;
