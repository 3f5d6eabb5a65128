//! The connections (SPEC §2, §4): each connection's phase from hello to the final line, its
//! deadline (§4.5), the input held while its verb is pending (§4.3), its final line, close
//! and service-log line (§4.4, §8.2), the answer linger (§4.3, §4.4), and the books kept
//! about connections: the strangers' (`hub::strangers`, §4.6, §8.1) and the parked status
//! waits (`hub::receipts`, §12.4).
//!
//! Owns the table of connections and the indices over it (by deadline, by the envelope a
//! status wait watches, by standing), and the helpers every verb answers with: write, reply,
//! fail, finish, close, the service-log line. Refuses deciding what a verb means (the verbs
//! do, `hub::verbs`) and what a line is (the dispatcher, `hub::session`); refuses IO, like the
//! rest of the core: what it says goes into the `Outbox` it is handed.
//!
//! What follows a connection's verb (SPEC §4.3, §12.2): lines are taken strictly in the order
//! they came, whatever reads they arrived in, so that no outcome depends on how the client's
//! bytes were split into TCP segments. A verb runs as if it were alone: a line that arrives
//! while it is pending is not looked at until the verb's answer is out (`hold`); then it is
//! what it would have been had it come later: the ack candidate after an ack-mode delivery,
//! otherwise a line after the verb, answered with `LINE_AFTER_THE_VERB` after the verb's own
//! reply (`end_exchange`). Held input is summarised at once (an ack's id as a digest), so a
//! connection never holds more than a few bytes of it (`hub::pipeline`).
//!
//! The answer linger (SPEC §4.3, §4.4; `limits.answer_linger_ms` in docs/operations.md):
//! after `Output::Answered`, the IO layer reports the flush (`flushed`); for
//! `answer_linger_ms` a line the client wrote before it read the reply is still taken and
//! answered `a line after the verb: …` (the dispatcher does that in `Phase::Replied`); when
//! the linger is over, or at once when it is 0, the core emits `Output::Close { linger: true
//! }`, which the IO layer carries out as after an error line: shut down its sending side,
//! drain the peer's input until its close or `limits.hello_timeout_ms`. The deadline is an
//! ordinary connection deadline (`poll_timeout` / `pop_expired`).

use super::conn_map::{ConnId, ConnMap};
use super::event::Output;
use super::outbox::Outbox;
use super::pipeline::{self, AckInput, LINE_AFTER_THE_VERB};
use super::receipts::Waits;
use super::router::{Parked, Queued};
use super::strangers::{Standing, Strangers};
use crate::kernel::now::Now;
use crate::wire::{HubLine, WaitEnd, WaitFor};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

#[derive(Debug)]
pub(in crate::hub) enum Phase {
    /// Waiting for the hello line.
    Hello,
    /// Authenticated; waiting for the verb line.
    Verb,
    /// A send is staged; `accepted` goes out after the commit.
    Staged,
    /// A parked await; `deadline` None waits forever; `ack` asks for acknowledged delivery.
    Parked {
        parked: Parked,
        deadline: Option<Instant>,
        ack: bool,
    },
    /// A parked await that a staged send has claimed; the deadline is suspended.
    Claimed {
        parked: Parked,
        deadline: Option<Instant>,
        ack: bool,
    },
    /// A delivery line is out. Plain: consumed once the socket accepted its first byte
    /// (`committed`). Ack mode: consumed only by the reader's ack.
    Delivering {
        /// Boxed, so this variant is not what sizes every `Conn` (a parked await's included:
        /// docs/performance.md, "W3: memory per parked await").
        env: Box<Queued>,
        committed: bool,
        ack: bool,
    },
    /// The reader acked; the ack waits for the commit that makes it durable.
    AckStaged,
    /// A `status` waiting for its envelope to reach a stage (SPEC §12.4, `hub::receipts`):
    /// the ledger key it watches; the deadline, if any, is the connection's.
    StatusWait {
        sender: String,
        id: String,
        wait_for: WaitFor,
    },
    /// A headless task's permission prompt (`task_permission`, issue 37 design §6) waiting for
    /// its decision: prompt `seq` of `task`, whose one reply is its final line. No deadline:
    /// the request it is held as has its own expiry, and the task's end answers it.
    Asking { task: String, seq: u32 },
    /// A `lease_claim` parked behind a conflict (lease design §A.2): waiter `waiter` of the
    /// lease machine, whose grant is its final line; the deadline, if any, is the claim's
    /// `timeoutSecs` and is the connection's.
    LeaseWait { waiter: String },
    /// The verb's outcome is committed to the store; its final line (`accepted`, `acked`)
    /// waits for the store's flush to disk (SPEC §12.1). `outcome` is for the service log.
    Syncing { outcome: &'static str },
    /// The final line is queued and `Output::Answered` emitted: the exchange is over, the
    /// connection stays open until the client closes it, and a line it sends meanwhile gets
    /// the error of SPEC §4.3.
    Replied,
    /// The final line is queued and Close emitted; waiting for `handle_closed`.
    Done,
}

#[derive(Debug)]
pub(in crate::hub) struct Conn {
    pub(in crate::hub) phase: Phase,
    pub(in crate::hub) name: Option<String>,
    /// The verb, for the service log.
    pub(in crate::hub) verb: &'static str,
    pub(in crate::hub) opened: Instant,
    /// The deadline registered in `Conns::deadlines` for this connection, if any.
    pub(in crate::hub) deadline: Option<Instant>,
    /// The peer sent EOF: nothing more will arrive.
    pub(in crate::hub) eof: bool,
    /// Input that arrived while the verb was pending, kept for when the connection can take it
    /// (SPEC §4.3): the first such line, summarised as the line after an ack-mode delivery,
    /// when the pending verb is an ack-mode await (it becomes that line if the await delivers).
    /// Boxed for the same reason as `Phase::Delivering`'s envelope: rarely set, 40 bytes inline.
    pub(in crate::hub) held_ack: Option<Box<AckInput>>,
    /// A line arrived while the verb was pending that will be answered as a line after the
    /// verb's reply.
    pub(in crate::hub) held_extra: bool,
    /// An error line was written: the close lingers (SPEC §4.4, `Output::Close`).
    pub(in crate::hub) errored: bool,
    /// The kind of reader its await declared (SPEC §12.4 "Readers"); None before an await,
    /// `Reader::Unknown` for an await that declared none.
    pub(in crate::hub) reader: Option<crate::wire::Reader>,
    /// Stranger or agent, and whether its records are written (`hub::strangers`).
    pub(in crate::hub) standing: Standing,
    /// `Output::Close` was emitted: nothing more (line, answer or second close) goes to this
    /// connection; it waits for `handle_closed`. A plain delivery keeps its `Delivering`
    /// phase after its close (its outcome is decided at the release), so the phase alone
    /// cannot say this.
    pub(in crate::hub) closed: bool,
    /// Its hello asked for the `warning` of `accepted` (SPEC §5.1, `hub::recipient`).
    pub(in crate::hub) warn: bool,
}

/// The phases `end_exchange` leaves a connection in after `Output::Answered`.
pub(in crate::hub) fn answered(phase: &Phase) -> bool {
    matches!(phase, Phase::Replied | Phase::Delivering { ack: false, .. })
}

/// The connection table and the books kept about it (module doc).
#[derive(Debug, Default)]
pub(in crate::hub) struct Conns {
    /// Boxed: a map's table holds up to 2.3 times its entries' worth of slots, so an inline
    /// `Conn` (then 280 bytes) cost about 470 bytes per parked await at 10,000 of them
    /// (docs/performance.md, "W3: memory per parked await"); a box costs its own size. Keyed
    /// by the ids the IO layer hands out, so the cheap hasher serves (`hub::conn_map`).
    table: ConnMap<Box<Conn>>,
    /// Every connection's deadline, earliest first.
    deadlines: BTreeSet<(Instant, ConnId)>,
    /// Connections without an identity, connections per name, strangers' records
    /// (`strangers`, SPEC §4.6, §8.1).
    strangers: Strangers,
    /// Parked `status` waits, by the envelope each watches (`receipts`).
    waits: Waits,
    /// Parked permission prompts, by (task, seq) (`Phase::Asking`).
    asking: BTreeMap<(String, u32), ConnId>,
    /// The hub is stopping (SPEC §4.6): answered connections close without waiting for
    /// their clients.
    shutting_down: bool,
}

impl Conns {
    // ----- the table -----

    /// A connection was accepted: it waits for its hello until `hello_deadline`, a stranger
    /// until its hello authenticates it.
    pub(in crate::hub) fn open(&mut self, conn: ConnId, hello_deadline: Instant, now: Now) {
        self.table.insert(
            conn,
            Box::new(Conn {
                phase: Phase::Hello,
                name: None,
                verb: "-",
                opened: now.mono,
                deadline: None,
                eof: false,
                held_ack: None,
                held_extra: false,
                errored: false,
                reader: None,
                standing: Standing::Stranger,
                closed: false,
                warn: false,
            }),
        );
        self.set_deadline(conn, Some(hello_deadline));
        // Its `connected` record goes out with its first outcome (`hub::strangers`): at once
        // with `authenticated` for an agent, within the strangers' rate for anyone else.
        self.strangers.arrived(conn);
    }

    pub(in crate::hub) fn get(&self, conn: &ConnId) -> Option<&Conn> {
        self.table.get(conn).map(Box::as_ref)
    }

    pub(in crate::hub) fn get_mut(&mut self, conn: &ConnId) -> Option<&mut Conn> {
        self.table.get_mut(conn).map(Box::as_mut)
    }

    pub(in crate::hub) fn contains(&self, conn: &ConnId) -> bool {
        self.table.contains_key(conn)
    }

    /// The connection is released: it leaves the table (its deadline and books first:
    /// `release`).
    pub(in crate::hub) fn remove(&mut self, conn: &ConnId) -> Option<Box<Conn>> {
        self.table.remove(conn)
    }

    /// Connections the core still tracks.
    pub(in crate::hub) fn len(&self) -> usize {
        self.table.len()
    }

    /// Every open connection's id, in no particular order.
    pub(in crate::hub) fn ids(&self) -> Vec<ConnId> {
        self.table.keys().copied().collect()
    }

    /// Every open connection, in no particular order.
    pub(in crate::hub) fn iter(&self) -> impl Iterator<Item = (ConnId, &Conn)> {
        self.table.iter().map(|(&id, c)| (id, c.as_ref()))
    }

    /// `conn`'s verb line is `verb` (for the service log).
    pub(in crate::hub) fn set_verb(&mut self, conn: ConnId, verb: &'static str) {
        if let Some(c) = self.table.get_mut(&conn) {
            c.verb = verb;
        }
    }

    /// The authenticated name of `conn`, whose verb is being handled.
    pub(in crate::hub) fn asker(&self, conn: ConnId) -> String {
        self.table
            .get(&conn)
            .and_then(|c| c.name.clone())
            // Invariant: verbs run only for a connection in its verb phase, which has a name.
            .expect("verb phase is authenticated")
    }

    /// The hub is stopping (SPEC §4.6).
    pub(in crate::hub) fn stop(&mut self) {
        self.shutting_down = true;
    }

    pub(in crate::hub) fn shutting_down(&self) -> bool {
        self.shutting_down
    }

    // ----- deadlines (SPEC §4.5) -----

    pub(in crate::hub) fn set_deadline(&mut self, conn: ConnId, deadline: Option<Instant>) {
        let Some(c) = self.table.get_mut(&conn) else {
            return;
        };
        if let Some(old) = c.deadline.take() {
            self.deadlines.remove(&(old, conn));
        }
        if let Some(at) = deadline {
            c.deadline = Some(at);
            self.deadlines.insert((at, conn));
        }
    }

    /// The earliest connection deadline.
    pub(in crate::hub) fn poll_timeout(&self) -> Option<Instant> {
        self.deadlines.first().map(|&(at, _)| at)
    }

    /// The next connection whose deadline is at or before `now`, its deadline cleared; None
    /// when none is due.
    pub(in crate::hub) fn pop_expired(&mut self, now: Now) -> Option<ConnId> {
        loop {
            let &(at, conn) = self.deadlines.first()?;
            if at > now.mono {
                return None;
            }
            self.deadlines.remove(&(at, conn));
            if let Some(c) = self.table.get_mut(&conn) {
                c.deadline = None;
                return Some(conn);
            }
        }
    }

    // ----- replies and bookkeeping -----

    pub(in crate::hub) fn write(&mut self, out: &mut Outbox, conn: ConnId, line: &HubLine) {
        // Nothing goes to a connection the IO layer released (a batch's outcome can come
        // after its sender left).
        let Some(c) = self.table.get_mut(&conn) else {
            return;
        };
        if c.closed {
            return;
        }
        c.errored |= matches!(line, HubLine::Error { .. });
        out.push(Output::Write {
            conn,
            line: line.encode(),
        });
    }

    /// Sends the connection's final line; the exchange is over (`end_exchange`).
    pub(in crate::hub) fn reply(
        &mut self,
        out: &mut Outbox,
        conn: ConnId,
        line: &HubLine,
        outcome: &str,
        now: Now,
    ) {
        self.write(out, conn, line);
        self.log(out, conn, outcome, "", now);
        self.end_exchange(out, conn, now);
    }

    /// Sends an error line (always the last line) and closes.
    pub(in crate::hub) fn fail(&mut self, out: &mut Outbox, conn: ConnId, message: &str, now: Now) {
        self.write(
            out,
            conn,
            &HubLine::Error {
                message: message.to_owned(),
            },
        );
        self.log(out, conn, "error", message, now);
        self.finish(out, conn);
    }

    pub(in crate::hub) fn finish(&mut self, out: &mut Outbox, conn: ConnId) {
        self.set_deadline(conn, None);
        // A parked status wait ended by an error line leaves its room (`hub::receipts`).
        self.unwatch(conn);
        let Some(c) = self.table.get_mut(&conn) else {
            return;
        };
        // A claimed waiter becomes Done too: once closed it must take no more input, and
        // `accept` routes the envelope of a waiter that is no longer Claimed elsewhere.
        if !matches!(c.phase, Phase::Delivering { .. } | Phase::AckStaged) {
            c.phase = Phase::Done;
        }
        let linger = c.errored;
        self.push_close(out, conn, linger);
    }

    /// Emits the connection's one `Output::Close`; a second request (a shutdown or a linger
    /// ending after an error close, a failure after the answer's close) changes nothing.
    pub(in crate::hub) fn push_close(&mut self, out: &mut Outbox, conn: ConnId, linger: bool) {
        let Some(c) = self.table.get_mut(&conn) else {
            return;
        };
        if std::mem::replace(&mut c.closed, true) {
            return;
        }
        out.push(Output::Close { conn, linger });
    }

    pub(in crate::hub) fn log(
        &mut self,
        out: &mut Outbox,
        conn: ConnId,
        outcome: &str,
        detail: &str,
        now: Now,
    ) {
        // A stranger's line is written only with its records (`hub::strangers`); this may be
        // its first outcome, which decides that.
        if !self.stranger_ended(out, conn, now) {
            return;
        }
        if let Some(c) = self.table.get(&conn) {
            let line = service_line(c, conn, outcome, detail, now);
            out.log(line);
        }
    }

    /// The service-log line of a connection already out of the table (`handle_closed`).
    pub(in crate::hub) fn log_conn(
        out: &mut Outbox,
        c: &Conn,
        conn: ConnId,
        outcome: &str,
        detail: &str,
        now: Now,
    ) {
        if matches!(c.standing, Standing::Stranger | Standing::StrangerSummed) {
            return;
        }
        let line = service_line(c, conn, outcome, detail, now);
        out.log(line);
    }

    // ----- what follows the verb (SPEC §4.3, §12.2) -----

    /// Keeps input that arrived while `conn`'s verb is pending: the first line after an
    /// ack-mode await (summarised by `summary`, only then), or the mark that a line came.
    pub(in crate::hub) fn hold(&mut self, conn: ConnId, summary: impl FnOnce() -> AckInput) {
        let Some(c) = self.table.get_mut(&conn) else {
            return;
        };
        let ack_await = matches!(
            c.phase,
            Phase::Parked { ack: true, .. }
                | Phase::Claimed { ack: true, .. }
                | Phase::Delivering {
                    ack: true,
                    committed: false,
                    ..
                }
        );
        if ack_await && c.held_ack.is_none() && !c.held_extra {
            c.held_ack = Some(Box::new(summary()));
        } else {
            c.held_extra = true;
        }
    }

    /// The connection's final line is out. A line that came while the verb was pending is
    /// answered now, after it; otherwise the exchange is over and the connection stays open
    /// only until the client closes it (`Output::Answered`). A plain delivery keeps its phase:
    /// its outcome (delivered or lost) is decided when the socket is released.
    pub(in crate::hub) fn end_exchange(&mut self, out: &mut Outbox, conn: ConnId, now: Now) {
        let Some(c) = self.table.get_mut(&conn) else {
            return;
        };
        if c.held_ack.take().is_some() || std::mem::take(&mut c.held_extra) {
            return self.fail(out, conn, LINE_AFTER_THE_VERB, now);
        }
        if !matches!(c.phase, Phase::Delivering { .. }) {
            c.phase = Phase::Replied;
        }
        let closed = c.closed;
        self.set_deadline(conn, None);
        if closed {
            return;
        }
        // A stopping hub does not wait for clients to close (SPEC §4.6).
        if self.shutting_down {
            self.push_close(out, conn, false);
        } else {
            out.push(Output::Answered { conn });
        }
    }

    /// Hands `env` to the await on `conn` as its delivery line. Ack mode waits for the ack
    /// until `ack_deadline`; a plain delivery ends the exchange.
    pub(in crate::hub) fn hand_off(
        &mut self,
        out: &mut Outbox,
        conn: ConnId,
        env: Queued,
        ack: bool,
        ack_deadline: Instant,
        now: Now,
    ) {
        let line = env.envelope_line();
        let c = self
            .table
            .get_mut(&conn)
            // Invariant: the callers hand off to a connection they found parked or claimed.
            .expect("deliver targets a live connection");
        c.phase = Phase::Delivering {
            env: Box::new(env),
            committed: false,
            ack,
        };
        out.push(Output::Handoff { conn, line });
        if ack {
            self.set_deadline(conn, Some(ack_deadline));
            // A line that came while the await was parked is the line after this delivery;
            // it is taken once the delivery's first byte is accepted
            // (`handle_delivery_committed`), never before.
        } else {
            self.end_exchange(out, conn, now);
        }
    }

    /// The parked await on `waiter` is claimed by a staged send (`admit`): its deadline is
    /// suspended until the commit decides.
    pub(in crate::hub) fn claim(&mut self, waiter: ConnId, parked: Parked) {
        let w = self
            .table
            .get_mut(&waiter)
            // Invariant: the router's waiters are live connections, parked.
            .expect("parked waiters are live connections");
        let Phase::Parked { deadline, ack, .. } = w.phase else {
            unreachable!("router waiters are parked")
        };
        w.phase = Phase::Claimed {
            parked,
            deadline,
            ack,
        };
        self.set_deadline(waiter, None);
    }

    // ----- the answer linger (SPEC §4.3, §4.4) -----

    /// Every byte the connection was given up to and including its final line (after
    /// `Output::Answered`) is in the kernel. Starts the answer linger of `linger`, or ends the
    /// exchange now when it is 0. Ignored for a connection that is not answered (an error
    /// close), whose peer has closed or whose linger already runs, and by a stopping hub,
    /// which closes answered connections without waiting (SPEC §4.6).
    pub(in crate::hub) fn flushed(
        &mut self,
        out: &mut Outbox,
        conn: ConnId,
        linger: Duration,
        now: Now,
    ) {
        let Some(c) = self.table.get(&conn) else {
            return;
        };
        if !answered(&c.phase) || c.eof || c.deadline.is_some() || self.shutting_down {
            return;
        }
        if linger.is_zero() {
            return self.linger_over(out, conn);
        }
        self.set_deadline(conn, Some(crate::kernel::deadline::after(now.mono, linger)));
    }

    /// The linger deadline of an answered connection passed (from `handle_timeout`, which
    /// sends a deadline here only for a connection in an answered phase). No error line: the
    /// client had its answer; the close drains what it still sends so a reset cannot destroy
    /// that answer in flight (SPEC §4.4).
    pub(in crate::hub) fn linger_over(&mut self, out: &mut Outbox, conn: ConnId) {
        self.set_deadline(conn, None);
        let Some(c) = self.table.get_mut(&conn) else {
            return;
        };
        // A plain delivery keeps its phase: its outcome is decided when the socket is
        // released (`handle_closed`), as `end_exchange` says.
        if matches!(c.phase, Phase::Replied) {
            c.phase = Phase::Done;
        }
        self.push_close(out, conn, true);
    }

    // ----- strangers (SPEC §4.6, §8.1; `hub::strangers`) -----

    /// `conn`'s hello proved it is `name`. Its `connected` record goes out now, ahead of
    /// `authenticated` (v4: written with the connection's first outcome). Returns false,
    /// taking no slot, when `name` already holds `cap` connections
    /// (`limits.max_connections_per_agent`; the caller refuses the hello).
    pub(in crate::hub) fn authenticated(
        &mut self,
        out: &mut Outbox,
        conn: ConnId,
        name: &str,
        cap: usize,
    ) -> bool {
        let admitted = self.strangers.authenticated(conn, name, cap, out);
        if let Some(c) = self.table.get_mut(&conn) {
            c.standing = if admitted {
                Standing::Agent
            } else {
                Standing::AgentRefused
            };
        }
        admitted
    }

    /// `conn`'s hello failed, asserting `tried`: its first outcome (`Strangers::outcome`);
    /// `recordable` says whether `tried` may be written (`strangers::recordable`).
    pub(in crate::hub) fn hello_failed(
        &mut self,
        out: &mut Outbox,
        conn: ConnId,
        tried: String,
        recordable: &dyn Fn(&str) -> bool,
        now: Now,
    ) {
        if let Some(c) = self.table.get_mut(&conn) {
            let standing = &mut c.standing;
            self.strangers
                .outcome(standing, conn, Some(tried), recordable, now, out);
        }
    }

    /// `conn`'s first outcome, if it is a stranger that has none yet, is its end without an
    /// authenticated hello. True when its records (and so its service-log lines) are written;
    /// also true for a connection that is no stranger.
    fn stranger_ended(&mut self, out: &mut Outbox, conn: ConnId, now: Now) -> bool {
        let Some(c) = self.table.get_mut(&conn) else {
            return false;
        };
        let standing = &mut c.standing;
        self.strangers
            .outcome(standing, conn, None, &|_| false, now, out)
    }

    /// The socket of `conn` is being released: a stranger not yet decided is decided now (it
    /// ended without a line the core answered: evicted, reset, or its first read failed),
    /// and the books let go of it.
    pub(in crate::hub) fn stranger_left(&mut self, out: &mut Outbox, conn: ConnId, now: Now) {
        let Some(c) = self.table.get_mut(&conn) else {
            return;
        };
        match c.standing {
            Standing::Stranger => {
                let standing = &mut c.standing;
                self.strangers
                    .outcome(standing, conn, None, &|_| false, now, out);
            }
            Standing::Agent => {
                if let Some(name) = c.name.as_deref() {
                    self.strangers.free_slot(name);
                }
            }
            _ => {}
        }
        self.strangers.left(conn);
    }

    /// Writes the `strangers` record and its service-log line when one is due at `now`, or
    /// whenever strangers are counted with `force` (a stop: the count must not be lost).
    pub(in crate::hub) fn sum_strangers(&mut self, out: &mut Outbox, now: Now, force: bool) {
        self.strangers.sum(now, force, out);
    }

    /// When the next `strangers` record is due.
    pub(in crate::hub) fn strangers_due(&self) -> Option<Instant> {
        self.strangers.poll_timeout()
    }

    /// Open connections that have not authenticated.
    pub(in crate::hub) fn unauthenticated(&self) -> usize {
        self.strangers.unauthenticated()
    }

    /// The oldest open connection that has not authenticated.
    pub(in crate::hub) fn oldest_unauthenticated(&self) -> Option<ConnId> {
        self.strangers.oldest()
    }

    // ----- permission prompts (issue 37 design §6; `verbs::task_permission`) -----

    /// Parks `conn` as the asker of prompt `seq` of `task` until its decision.
    pub(in crate::hub) fn park_asking(&mut self, conn: ConnId, task: String, seq: u32) {
        self.asking.insert((task.clone(), seq), conn);
        if let Some(c) = self.table.get_mut(&conn) {
            c.phase = Phase::Asking { task, seq };
        }
        self.set_deadline(conn, None);
    }

    /// The connection parked as the asker of prompt `seq` of `task`, which leaves the index.
    pub(in crate::hub) fn take_asking(&mut self, task: &str, seq: u32) -> Option<ConnId> {
        self.asking.remove(&(task.to_owned(), seq))
    }

    /// `conn` no longer waits for its prompt (it closed): its key, for the book.
    pub(in crate::hub) fn unpark_asking(&mut self, conn: ConnId) -> Option<(String, u32)> {
        let Some(Phase::Asking { task, seq }) = self.table.get(&conn).map(|c| &c.phase) else {
            return None;
        };
        let key = (task.clone(), *seq);
        (self.asking.get(&key) == Some(&conn)).then(|| {
            self.asking.remove(&key);
            key
        })
    }

    /// Prompts parked now.
    pub(in crate::hub) fn parked_prompts(&self) -> usize {
        self.asking.len()
    }

    // ----- status waits (SPEC §12.4; `hub::receipts`) -----

    /// Parks `conn`'s `status` until the envelope `(sender, id)` reaches `wait_for`, or until
    /// `deadline`.
    pub(in crate::hub) fn park_status_wait(
        &mut self,
        conn: ConnId,
        sender: String,
        id: String,
        wait_for: WaitFor,
        deadline: Option<Instant>,
    ) {
        self.waits.watch(&sender, &id, conn);
        if let Some(c) = self.table.get_mut(&conn) {
            c.phase = Phase::StatusWait {
                sender,
                id,
                wait_for,
            };
        }
        self.set_deadline(conn, deadline);
    }

    /// The parked waits on `(sender, id)` that end now, each with how: `end` judges the stage
    /// each waits for. Empty when none is parked anywhere (without a lookup).
    pub(in crate::hub) fn status_waits_ended(
        &self,
        sender: &str,
        id: &str,
        end: impl Fn(WaitFor) -> Option<WaitEnd>,
    ) -> Vec<(ConnId, WaitEnd)> {
        if self.waits.parked() == 0 {
            return Vec::new();
        }
        let Some(conns) = self.waits.watchers(sender, id) else {
            return Vec::new();
        };
        let mut ended = Vec::new();
        for &conn in conns {
            let Some(Phase::StatusWait { wait_for, .. }) = self.get(&conn).map(|c| &c.phase) else {
                continue;
            };
            if let Some(how) = end(*wait_for) {
                ended.push((conn, how));
            }
        }
        ended
    }

    /// Drops `conn`'s parked wait, if it has one (the connection is ending).
    pub(in crate::hub) fn unwatch(&mut self, conn: ConnId) {
        if let Some(Phase::StatusWait { sender, id, .. }) = self.table.get(&conn).map(|c| &c.phase)
        {
            self.waits.unwatch(conn, sender, id);
        }
    }

    /// Drops `conn`'s wait on `(sender, id)`.
    pub(in crate::hub) fn unwatch_key(&mut self, conn: ConnId, sender: &str, id: &str) {
        self.waits.unwatch(conn, sender, id);
    }

    /// Status waits parked now.
    pub(in crate::hub) fn parked_status_waits(&self) -> usize {
        self.waits.parked()
    }

    /// Whether `conn` still waits for its hello: its lines are capped at
    /// `wire::HELLO_MAX_LINE_BYTES` (SPEC §2.1) until it has one.
    pub(in crate::hub) fn awaits_hello(&self, conn: ConnId) -> bool {
        self.table
            .get(&conn)
            .is_some_and(|c| matches!(c.phase, Phase::Hello))
    }
}

/// A connection's service-log line. Its detail is an error or close reason with every quoted
/// span left out (`pipeline::redact_quoted`): the ids and names some error texts quote come
/// from clients and peers, and the service log holds none of their values (SPEC §8.2).
fn service_line(c: &Conn, conn: ConnId, outcome: &str, detail: &str, now: Now) -> String {
    let elapsed_us = now.mono.saturating_duration_since(c.opened).as_micros();
    let name = c.name.as_deref().unwrap_or("-");
    let detail = pipeline::redact_quoted(detail);
    if detail.is_empty() {
        // Every connection's last line (a plain close): without `format!` (docs/performance.md,
        // issue 13, "Design decisions"); the same text as the branch below without
        // its detail.
        use crate::wire::json_text::push_u64;
        let mut line = String::with_capacity(64 + name.len() + outcome.len());
        line.push_str("conn=");
        push_u64(&mut line, conn);
        line.push_str(" name=");
        line.push_str(name);
        line.push_str(" verb=");
        line.push_str(c.verb);
        line.push_str(" outcome=");
        line.push_str(outcome);
        line.push_str(" elapsed_us=");
        // Invariant-free: a u64 of microseconds is 584,000 years.
        push_u64(&mut line, u64::try_from(elapsed_us).unwrap_or(u64::MAX));
        line
    } else {
        format!(
            "conn={conn} name={name} verb={} outcome={outcome} elapsed_us={elapsed_us} detail={:?}",
            c.verb, detail
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hub::event::AuditEvent;
    use chrono::{DateTime, Utc};

    /// Every connection's `Conn` lives in a box of its own size, a parked await's included, so
    /// what the struct holds inline is what W3 measures per waiter (docs/performance.md, "W3:
    /// memory per parked await": 280 bytes before the delivery's envelope and the held ack
    /// line were boxed). A new inline field that grows it should be a decision, not a drift.
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn a_connection_costs_the_core_at_most_192_bytes_inline() {
        assert!(
            std::mem::size_of::<Conn>() <= 192,
            "hub::conns::Conn is {} bytes",
            std::mem::size_of::<Conn>()
        );
        // The largest phase is a parked await's; a delivery's envelope is boxed.
        assert!(std::mem::size_of::<Phase>() <= std::mem::size_of::<Parked>() + 32);
    }

    fn clock() -> impl Fn(u64) -> Now {
        let origin = crate::kernel::deadline::test_origin();
        let wall = DateTime::parse_from_rfc3339("2026-07-21T06:40:51Z")
            .expect("fixed time")
            .with_timezone(&Utc);
        move |ms| Now {
            mono: origin + Duration::from_millis(ms),
            wall: wall + chrono::Duration::milliseconds(ms as i64),
        }
    }

    /// An agent's connection: authenticated, in its verb phase.
    fn agent(c: &mut Conns, out: &mut Outbox, conn: ConnId, now: Now) {
        c.open(conn, now.mono + Duration::from_secs(1), now);
        assert!(c.authenticated(out, conn, "bee", 4));
        let k = c.get_mut(&conn).expect("open");
        k.name = Some("bee".into());
        k.phase = Phase::Verb;
        while out.pop().is_some() {}
    }

    /// Deadlines come back earliest first, each once; a cleared one never.
    #[test]
    fn deadlines_expire_in_order_and_once() {
        let now = clock();
        let mut c = Conns::default();
        c.open(1, now(300).mono, now(0));
        c.open(2, now(100).mono, now(0));
        c.open(3, now(200).mono, now(0));
        c.set_deadline(3, None);
        assert_eq!(c.poll_timeout(), Some(now(100).mono));
        assert_eq!(c.pop_expired(now(99)), None);
        assert_eq!(c.pop_expired(now(400)), Some(2));
        assert_eq!(c.pop_expired(now(400)), Some(1));
        assert_eq!(c.pop_expired(now(400)), None);
        assert!(c.get(&1).is_some_and(|k| k.deadline.is_none()));
    }

    /// A reply ends the exchange (`Answered`); a line held meanwhile turns it into the error
    /// of SPEC §4.3 and a lingering close; nothing is written after the close.
    #[test]
    fn a_line_held_during_the_verb_is_answered_after_the_reply() {
        let now = clock();
        let (mut c, mut out) = (Conns::default(), Outbox::default());
        agent(&mut c, &mut out, 1, now(0));
        c.reply(&mut out, 1, &HubLine::Timeout, "timeout", now(1));
        assert!(matches!(out.pop(), Some(Output::Write { conn: 1, .. })));
        assert!(matches!(out.pop(), Some(Output::Log(l)) if l.contains("outcome=timeout")));
        assert_eq!(out.pop(), Some(Output::Answered { conn: 1 }));
        assert!(answered(&c.get(&1).expect("open").phase));

        agent(&mut c, &mut out, 2, now(0));
        c.get_mut(&2).expect("open").phase = Phase::Staged;
        c.hold(2, || AckInput::NotAck("x".into()));
        c.reply(&mut out, 2, &HubLine::Timeout, "timeout", now(1));
        let lines: Vec<Output> = std::iter::from_fn(|| out.pop()).collect();
        assert!(matches!(
            lines.as_slice(),
            [
                Output::Write { .. },
                Output::Log(_),
                Output::Write { .. },
                Output::Log(_),
                Output::Close {
                    conn: 2,
                    linger: true
                }
            ]
        ));
        c.write(&mut out, 2, &HubLine::Ok);
        c.push_close(&mut out, 2, false);
        assert_eq!(out.pop(), None, "nothing after the close");
    }

    /// An answered connection lingers for the configured time once flushed, then closes
    /// lingering; with no linger it closes at once.
    #[test]
    fn the_answer_linger_runs_on_the_connection_deadline() {
        let now = clock();
        let (mut c, mut out) = (Conns::default(), Outbox::default());
        agent(&mut c, &mut out, 1, now(0));
        c.reply(&mut out, 1, &HubLine::Timeout, "timeout", now(1));
        while out.pop().is_some() {}
        c.flushed(&mut out, 1, Duration::from_millis(50), now(2));
        assert_eq!(c.poll_timeout(), Some(now(52).mono));
        assert_eq!(c.pop_expired(now(52)), Some(1));
        c.linger_over(&mut out, 1);
        assert_eq!(
            out.pop(),
            Some(Output::Close {
                conn: 1,
                linger: true
            })
        );
        agent(&mut c, &mut out, 2, now(0));
        c.reply(&mut out, 2, &HubLine::Timeout, "timeout", now(1));
        while out.pop().is_some() {}
        c.flushed(&mut out, 2, Duration::ZERO, now(2));
        assert!(matches!(out.pop(), Some(Output::Close { conn: 2, .. })));
    }

    /// A status wait is found by the envelope it watches, and leaves with its connection.
    #[test]
    fn a_status_wait_is_found_by_its_envelope_and_leaves_with_its_connection() {
        let now = clock();
        let (mut c, mut out) = (Conns::default(), Outbox::default());
        agent(&mut c, &mut out, 1, now(0));
        let reached = |w: WaitFor| (w == WaitFor::Delivered).then_some(WaitEnd::Reached);
        assert!(c.status_waits_ended("alice", "e1", reached).is_empty());
        c.park_status_wait(1, "alice".into(), "e1".into(), WaitFor::Delivered, None);
        c.park_status_wait(2, "alice".into(), "e1".into(), WaitFor::Acked, None);
        assert_eq!(c.parked_status_waits(), 2);
        assert_eq!(
            c.status_waits_ended("alice", "e1", reached),
            [(1, WaitEnd::Reached)],
            "only the wait the change ends"
        );
        assert!(c.status_waits_ended("alice", "e2", reached).is_empty());
        c.fail(&mut out, 1, "gone", now(1));
        assert_eq!(c.parked_status_waits(), 1);
    }

    /// An agent's first outcome writes its `connected` record with `authenticated`; a
    /// stranger's is decided by its end, and its books let go of it.
    #[test]
    fn strangers_are_booked_until_they_leave() {
        let now = clock();
        let (mut c, mut out) = (Conns::default(), Outbox::default());
        c.open(1, now(1000).mono, now(0));
        assert!(c.awaits_hello(1));
        assert_eq!(
            (c.unauthenticated(), c.oldest_unauthenticated()),
            (1, Some(1))
        );
        c.fail(&mut out, 1, "expected hello", now(1));
        assert_eq!(
            out.pop(),
            Some(Output::Write {
                conn: 1,
                line: HubLine::Error {
                    message: "expected hello".into()
                }
                .encode()
            })
        );
        assert_eq!(
            out.pop(),
            Some(Output::Audit(AuditEvent::Connected { conn: 1 })),
            "its first outcome writes its record"
        );
        c.stranger_left(&mut out, 1, now(2));
        c.remove(&1);
        assert_eq!(c.unauthenticated(), 0);
    }
}
