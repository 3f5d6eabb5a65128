//! One connection's protocol (SPEC §2, §4): its phases from hello to the final line, the
//! hello and its authentication (§4.1, §6.2), the dispatch of the verb line (§4.3), input
//! that arrives in each phase, the peer's EOF and the socket's release (§5.4), the
//! connection deadlines (§4.5), the shutdown of open connections (§4.6), and the helpers
//! every verb answers with: write, reply, fail, finish, the service-log line (§8.2).
//!
//! The verbs themselves are in `hub::verbs`, one file each. Refuses IO, like the rest of the
//! core.

use super::event::{AuditEvent, Output};
use super::router::{Parked, Queued};
use super::{pipeline, ConnId, Hub, Now};
use crate::wire::{ClientLine, HubLine};
use std::time::Instant;

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
        wait_for: crate::wire::WaitFor,
    },
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

/// Whether a connection has an identity, and what its records are (`hub::strangers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::hub) enum Standing {
    /// Not authenticated, no outcome yet: its `connected` record waits for one.
    Stranger,
    /// Not authenticated; its records and service-log lines are written (within the
    /// strangers' record rate).
    StrangerRecorded,
    /// Not authenticated; counted for the next `strangers` record, nothing written of its own.
    StrangerSummed,
    /// Authenticated; holds one of its name's `limits.max_connections_per_agent` slots.
    Agent,
    /// Its hello was right but its name held every slot it may: refused, holding none.
    AgentRefused,
}

#[derive(Debug)]
pub(in crate::hub) struct Conn {
    pub(super) phase: Phase,
    pub(super) name: Option<String>,
    /// The verb, for the service log.
    pub(super) verb: &'static str,
    pub(super) opened: Instant,
    /// The deadline registered in `Hub::deadlines` for this connection, if any.
    pub(super) deadline: Option<Instant>,
    /// The peer sent EOF: nothing more will arrive.
    pub(super) eof: bool,
    /// Input that arrived while the verb was pending, kept for when the connection can take it
    /// (SPEC §4.3): the first such line, summarised as the line after an ack-mode delivery,
    /// when the pending verb is an ack-mode await (it becomes that line if the await delivers).
    /// Boxed for the same reason as `Phase::Delivering`'s envelope: rarely set, 40 bytes inline.
    pub(super) held_ack: Option<Box<pipeline::AckInput>>,
    /// A line arrived while the verb was pending that will be answered as a line after the
    /// verb's reply.
    pub(super) held_extra: bool,
    /// An error line was written: the close lingers (SPEC §4.4, `Output::Close`).
    pub(super) errored: bool,
    /// The kind of reader its await declared (SPEC §12.4 "Readers"); None before an await,
    /// `Reader::Unknown` for an await that declared none.
    pub(super) reader: Option<crate::wire::Reader>,
    /// Stranger or agent, and whether its records are written (`hub::strangers`).
    pub(super) standing: Standing,
    /// `Output::Close` was emitted: nothing more (line, answer or second close) goes to this
    /// connection; it waits for `handle_closed`. A plain delivery keeps its `Delivering`
    /// phase after its close (its outcome is decided at the release), so the phase alone
    /// cannot say this.
    pub(super) closed: bool,
    /// Its hello asked for the `warning` of `accepted` (SPEC §5.1, `hub::recipient`).
    pub(super) warn: bool,
}

impl Hub {
    // ----- inputs -----

    /// A connection was accepted; the hello deadline starts now.
    pub fn handle_connect(&mut self, conn: ConnId, now: Now) {
        self.conns.insert(
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
        self.set_deadline(
            conn,
            Some(crate::kernel::deadline::after(
                now.mono,
                self.limits.hello_timeout(),
            )),
        );
        // Its `connected` record goes out with its first outcome (`hub::strangers`): at once
        // with `authenticated` for an agent, within the strangers' rate for anyone else.
        self.stranger_arrived(conn);
        if self.shutting_down {
            self.fail(conn, "hub is shutting down", now);
        }
    }

    /// One complete line from the peer, without its `\n`. Every line is one line of the
    /// protocol, a blank one included (SPEC §2.1), and lines are taken in the order they came:
    /// one that arrives while the verb is pending waits until the verb is answered (SPEC §4.3),
    /// so how the bytes were split into reads never changes an outcome.
    pub fn handle_line(&mut self, conn: ConnId, line: &[u8], now: Now) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        match c.phase {
            Phase::Hello => self.on_hello_line(conn, line, now),
            Phase::Verb => self.on_verb_line(conn, line, now),
            Phase::Delivering {
                ack: true,
                committed: true,
                ..
            } => {
                let input = pipeline::AckInput::of_line(line);
                self.on_ack_input(conn, input, now)
            }
            // An ack cannot settle an envelope whose delivery has not reached the reader's
            // socket yet (SPEC §12.2): it waits for the first byte, like one written while
            // the await was parked.
            Phase::Delivering {
                ack: true,
                committed: false,
                ..
            }
            | Phase::Staged
            | Phase::Parked { .. }
            | Phase::Claimed { .. }
            | Phase::AckStaged
            | Phase::StatusWait { .. }
            | Phase::Syncing { .. } => self.hold(conn, || pipeline::AckInput::of_line(line)),
            Phase::Delivering { ack: false, .. } | Phase::Replied => {
                self.fail(conn, pipeline::LINE_AFTER_THE_VERB, now)
            }
            // An error line is out: input is discarded while the socket closes.
            Phase::Done => {}
        }
    }

    /// The peer sent a line longer than the cap (or other undecodable input). It takes the
    /// place of a line, in order, as `handle_line` says.
    pub fn handle_bad_input(&mut self, conn: ConnId, message: &str, now: Now) {
        let Some(c) = self.conns.get(&conn) else {
            return;
        };
        match c.phase {
            Phase::Hello | Phase::Verb => self.fail(conn, message, now),
            Phase::Delivering { ack: true, .. } => self.return_unacked(conn, message, now),
            Phase::Staged
            | Phase::Parked { .. }
            | Phase::Claimed { .. }
            | Phase::AckStaged
            | Phase::StatusWait { .. }
            | Phase::Syncing { .. } => {
                self.hold(conn, || pipeline::AckInput::NotAck(message.to_owned()))
            }
            Phase::Delivering { ack: false, .. } | Phase::Replied => {
                self.fail(conn, pipeline::LINE_AFTER_THE_VERB, now)
            }
            Phase::Done => {}
        }
    }

    /// The peer closed its sending side. A parked await is dropped at once (SPEC §5.4); a send
    /// still gets its reply.
    pub fn handle_eof(&mut self, conn: ConnId, now: Now) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        c.eof = true;
        match &c.phase {
            Phase::Hello | Phase::Verb => {
                self.log(conn, "closed", "peer closed before its verb", now);
                self.finish(conn);
            }
            Phase::Parked { parked, .. } => {
                let parked = parked.clone();
                self.router.unpark(&parked);
                self.log(
                    conn,
                    "dropped",
                    "parked await's peer closed; nothing consumed",
                    now,
                );
                self.finish(conn);
            }
            Phase::Claimed { .. } => {
                // The staged envelope is routed elsewhere at commit (see `commit`).
                self.log(
                    conn,
                    "dropped",
                    "claimed await's peer closed; the envelope is routed on",
                    now,
                );
                self.finish(conn);
            }
            Phase::StatusWait { .. } => {
                self.unwatch(conn);
                self.log(conn, "dropped", "status wait's peer closed", now);
                self.finish(conn);
            }
            // The reader can no longer ack: give the envelope back now.
            Phase::Delivering { ack: true, .. } => {
                self.return_unacked(conn, "reader closed without acking", now)
            }
            // Once answered, the IO layer closes on EOF itself (`Output::Answered`).
            Phase::Staged
            | Phase::Delivering { .. }
            | Phase::AckStaged
            | Phase::Syncing { .. }
            | Phase::Replied
            | Phase::Done => {}
        }
    }

    /// The IO layer released the socket. `flushed` says whether everything written to it was
    /// accepted by the kernel. Every connection ends with exactly one call.
    pub fn handle_closed(&mut self, conn: ConnId, flushed: bool, reason: &str, now: Now) {
        self.set_deadline(conn, None);
        self.stranger_left(conn, now);
        let Some(mut c) = self.conns.remove(&conn) else {
            return;
        };
        match std::mem::replace(&mut c.phase, Phase::Done) {
            Phase::Parked { parked, .. } => {
                self.router.unpark(&parked);
                self.log_conn(&c, conn, "dropped", reason, now);
            }
            Phase::StatusWait { sender, id, .. } => {
                self.unwatch_key(conn, &sender, &id);
                self.log_conn(&c, conn, "dropped", reason, now);
            }
            Phase::Staged => {
                // The sender never saw `accepted`, so the send must not happen.
                if let Some(pos) = self.staged.iter().position(|s| s.conn == Some(conn)) {
                    let s = self.staged.remove(pos);
                    self.unstage(
                        s,
                        &format!("sender went away before the commit: {reason}"),
                        now,
                    );
                    self.log_conn(&c, conn, "cancelled", reason, now);
                } else if let Some(pos) = self.staged_tasks.iter().position(
                    |t| matches!(t.then, super::TaskThen::Reply { conn: c, .. } if c == conn),
                ) {
                    // A delegation never answered `delegated` must not run either.
                    let t = self.staged_tasks.remove(pos);
                    if let (super::TaskThen::Reply { task, .. }, Some(book)) =
                        (t.then, self.tasks.as_mut())
                    {
                        book.withdraw(&task);
                    }
                    self.log_conn(&c, conn, "cancelled", reason, now);
                } else {
                    // Its batch is being written: the batch's result decides, unanswered.
                    let detail = format!("closed while its send was being committed: {reason}");
                    self.log_conn(&c, conn, "closed", &detail, now);
                }
            }
            Phase::Delivering {
                env,
                ack: true,
                committed,
            } => {
                self.log_conn(&c, conn, "requeued", reason, now);
                self.give_back(conn, *env, reason, committed, now);
            }
            Phase::Delivering {
                env,
                committed: false,
                ..
            } => {
                self.log_conn(&c, conn, "requeued", reason, now);
                self.give_back(conn, *env, reason, false, now);
            }
            Phase::Delivering {
                env,
                committed: true,
                ..
            } if !flushed => {
                self.log_conn(&c, conn, "lost", reason, now);
                self.lose(conn, *env, reason, now);
            }
            Phase::Delivering { .. } => self.log_conn(&c, conn, "delivered", "", now),
            // An ack already read stands: the commit settles it without a reply.
            Phase::AckStaged => self.log_conn(&c, conn, "acked", reason, now),
            // Committed, but the peer left before the flush let its reply go out.
            Phase::Syncing { outcome } => {
                let detail = format!("closed before the store's flush: {reason}");
                self.log_conn(&c, conn, outcome, &detail, now)
            }
            Phase::Hello | Phase::Verb | Phase::Claimed { .. } | Phase::Replied | Phase::Done => {}
        }
    }

    /// Begins a clean shutdown: every connection not waiting on a commit or a delivery gets an
    /// error line and is closed; parked awaits consume nothing.
    pub fn shutdown(&mut self, now: Now) {
        self.shutting_down = true;
        self.shutdown_tasks(now);
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
                Phase::StatusWait { .. } => {
                    self.unwatch(conn);
                    self.fail(conn, "hub is shutting down", now);
                }
                // Answered: close once the final line is written, without waiting for the
                // client's close (a plain delivery's outcome is still decided at the close).
                Phase::Replied | Phase::Delivering { ack: false, .. } => {
                    // Its answer linger (`hub::linger`), if running, ends with this close.
                    self.set_deadline(conn, None);
                    self.push_close(conn, false)
                }
                _ => {}
            }
        }
    }

    // ----- line handlers -----

    fn on_hello_line(&mut self, conn: ConnId, line: &[u8], now: Now) {
        match ClientLine::decode(line) {
            Err(e) => self.fail(conn, &e.to_string(), now),
            Ok(ClientLine::Hello(h)) => {
                // A task identity (docs/delegation.md "Task identity") is checked only for a
                // `task-` name, which no roster may hold.
                let verified = if crate::kernel::names::is_task_name(&h.name) {
                    self.verify_task_identity(&h.name, &h.token)
                } else {
                    self.roster.verify(&h.name, &h.token)
                };
                if verified && !self.stranger_authenticated(conn, &h.name) {
                    // The right credentials, but the name holds every connection it may
                    // (`limits.max_connections_per_agent`, SPEC §4.6): recorded as who it
                    // is, then refused.
                    let cap = self.limits.max_connections_per_agent();
                    if let Some(c) = self.conns.get_mut(&conn) {
                        c.name = Some(h.name.clone());
                    }
                    self.outputs
                        .push_back(Output::Audit(AuditEvent::Authenticated {
                            conn,
                            name: h.name,
                        }));
                    let msg = format!(
                        "too many connections for this agent (limit {cap}); try again later"
                    );
                    self.fail(conn, &msg, now);
                } else if verified {
                    let c = self
                        .conns
                        .get_mut(&conn)
                        .expect("caller checked the connection exists");
                    c.name = Some(h.name.clone());
                    c.phase = Phase::Verb;
                    c.warn = h.warn == Some(true);
                    // Looked up before it is inserted: a name seen before (every hello but
                    // a name's first) costs no copy of it.
                    let at = Some(now.wall.timestamp_millis());
                    match self.seen.get_mut(&h.name) {
                        Some(seen) => seen.0 = at,
                        None => {
                            self.seen.insert(h.name.clone(), (at, None));
                        }
                    }
                    self.set_deadline(
                        conn,
                        Some(crate::kernel::deadline::after(
                            now.mono,
                            self.limits.verb_timeout(),
                        )),
                    );
                    self.outputs
                        .push_back(Output::Audit(AuditEvent::Authenticated {
                            conn,
                            name: h.name,
                        }));
                    self.write(conn, &HubLine::Ok);
                } else {
                    // The name tried is recorded unless it holds a token (one sent in the
                    // wrong field), and only within the strangers' rate (`hub::strangers`).
                    self.stranger_outcome(conn, Some(h.name), now);
                    self.fail(
                        conn,
                        "authentication failed: unknown name or wrong token",
                        now,
                    );
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
            Ok(ClientLine::Status(req)) => {
                self.conns.get_mut(&conn).expect("caller checked").verb = "status";
                self.on_status(conn, req, now)
            }
            Ok(ClientLine::Ack(_)) => {
                self.fail(conn, "an ack outside an acknowledged delivery", now)
            }
            Ok(ClientLine::Who(req)) => {
                let c = self.conns.get_mut(&conn).expect("caller checked");
                c.verb = "who";
                let asker = c.name.clone().unwrap_or_default();
                let mut presence = self.presence_for(&asker);
                if req.wants_off_roster() {
                    presence.off_roster = Some(self.off_roster_for(Some(&asker)));
                }
                self.reply(conn, &HubLine::Who(presence), "who", now)
            }
            Ok(ClientLine::Delegate(req)) => {
                self.conns.get_mut(&conn).expect("caller checked").verb = "delegate";
                self.on_delegate(conn, req, now)
            }
            Ok(ClientLine::TaskStatus(req)) => {
                self.conns.get_mut(&conn).expect("caller checked").verb = "task_status";
                self.on_task_status(conn, req, now)
            }
            Ok(ClientLine::Tasks) => {
                self.conns.get_mut(&conn).expect("caller checked").verb = "tasks";
                self.on_tasks(conn, now)
            }
            Ok(ClientLine::Cancel(req)) => {
                self.conns.get_mut(&conn).expect("caller checked").verb = "cancel";
                self.on_cancel(conn, req, now)
            }
            Ok(ClientLine::TaskAnswer(req)) => {
                self.conns.get_mut(&conn).expect("caller checked").verb = "task_answer";
                self.on_task_answer(conn, req, now)
            }
            Ok(ClientLine::Turn(req)) => {
                self.conns.get_mut(&conn).expect("caller checked").verb = "turn";
                self.on_turn(conn, req, now)
            }
            Ok(ClientLine::Activity) => {
                self.conns.get_mut(&conn).expect("caller checked").verb = "activity";
                self.on_activity(conn, now)
            }
        }
    }

    // ----- replies and bookkeeping -----

    pub(super) fn write(&mut self, conn: ConnId, line: &HubLine) {
        // Nothing goes to a connection the IO layer released (a batch's outcome can come
        // after its sender left).
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if c.closed {
            return;
        }
        c.errored |= matches!(line, HubLine::Error { .. });
        self.outputs.push_back(Output::Write {
            conn,
            line: line.encode(),
        });
    }

    /// Sends the connection's final line; the exchange is over (`end_exchange`).
    pub(super) fn reply(&mut self, conn: ConnId, line: &HubLine, outcome: &str, now: Now) {
        self.write(conn, line);
        self.log(conn, outcome, "", now);
        self.end_exchange(conn, now);
    }

    /// Sends an error line (always the last line) and closes.
    pub(super) fn fail(&mut self, conn: ConnId, message: &str, now: Now) {
        self.write(
            conn,
            &HubLine::Error {
                message: message.to_owned(),
            },
        );
        self.log(conn, "error", message, now);
        self.finish(conn);
    }

    pub(super) fn finish(&mut self, conn: ConnId) {
        self.set_deadline(conn, None);
        // A parked status wait ended by an error line leaves its room (`hub::receipts`).
        self.unwatch(conn);
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        // A claimed waiter becomes Done too: once closed it must take no more input, and
        // `accept` routes the envelope of a waiter that is no longer Claimed elsewhere.
        if !matches!(c.phase, Phase::Delivering { .. } | Phase::AckStaged) {
            c.phase = Phase::Done;
        }
        let linger = c.errored;
        self.push_close(conn, linger);
    }

    /// Emits the connection's one `Output::Close`; a second request (a shutdown or a linger
    /// ending after an error close, a failure after the answer's close) changes nothing.
    pub(super) fn push_close(&mut self, conn: ConnId, linger: bool) {
        let Some(c) = self.conns.get_mut(&conn) else {
            return;
        };
        if std::mem::replace(&mut c.closed, true) {
            return;
        }
        self.outputs.push_back(Output::Close { conn, linger });
    }

    pub(super) fn set_deadline(&mut self, conn: ConnId, deadline: Option<Instant>) {
        let Some(c) = self.conns.get_mut(&conn) else {
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

    pub(super) fn log(&mut self, conn: ConnId, outcome: &str, detail: &str, now: Now) {
        // A stranger's line is written only with its records (`hub::strangers`); this may be
        // its first outcome, which decides that.
        if !self.stranger_outcome(conn, None, now) {
            return;
        }
        if let Some(c) = self.conns.get(&conn) {
            let line = service_line(c, conn, outcome, detail, now);
            self.outputs.push_back(Output::Log(line));
        }
    }

    pub(super) fn log_conn(
        &mut self,
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
        self.outputs.push_back(Output::Log(line));
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

    /// Every connection's `Conn` lives in a box of its own size, a parked await's included, so
    /// what the struct holds inline is what W3 measures per waiter (docs/performance.md, "W3:
    /// memory per parked await": 280 bytes before the delivery's envelope and the held ack
    /// line were boxed). A new inline field that grows it should be a decision, not a drift.
    #[cfg(target_pointer_width = "64")]
    #[test]
    fn a_connection_costs_the_core_at_most_192_bytes_inline() {
        assert!(
            std::mem::size_of::<Conn>() <= 192,
            "hub::session::Conn is {} bytes",
            std::mem::size_of::<Conn>()
        );
        // The largest phase is a parked await's; a delivery's envelope is boxed.
        assert!(std::mem::size_of::<Phase>() <= std::mem::size_of::<Parked>() + 32);
    }
}
