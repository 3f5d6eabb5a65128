//! One connection's protocol (SPEC §2, §4): the dispatcher. A connection's lines are taken
//! in its phase (§4.3): the hello and its authentication (§4.1, §6.2), the verb line handed
//! to its verb (`hub::verbs`, one file each), input that arrives while the verb is pending,
//! the peer's EOF and the socket's release (§5.4), the connection deadlines (§4.5), the
//! answer linger's flush report (§4.3, §4.4) and the shutdown of open connections (§4.6).
//!
//! The hub's own glue, as `impl Hub`: a line can touch any machine, and this is where it is
//! decided which one it drives. The connection's state and the helpers every verb answers
//! with (write, reply, fail, finish, the service-log line) are `hub::conns`'. Refuses IO,
//! like the rest of the core.

use super::admit::Admit;
use super::commit::TaskThen;
use super::conn_map::ConnId;
use super::conns::{self, Conns, Phase};
use super::event::AuditEvent;
use super::pipeline::{self, AckInput};
use super::recipient::Known;
use super::strangers;
use super::tasks::{self, TaskWork};
use super::verbs::lease::LeaseWork;
use super::verbs::{self, status};
use super::Hub;
use crate::kernel::now::Now;
use crate::wire::lease::LeaseRequest;
use crate::wire::{ClientLine, HubLine};
use std::time::Instant;

impl Hub {
    // ----- inputs -----

    /// A connection was accepted; the hello deadline starts now.
    pub fn handle_connect(&mut self, conn: ConnId, now: Now) {
        let hello_timeout = self.settings.limits.hello_timeout();
        let deadline = crate::kernel::deadline::after(now.mono, hello_timeout);
        self.conns.open(conn, deadline, now);
        if self.conns.shutting_down() {
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
                let input = AckInput::of_line(line);
                self.ack_input(conn, input, now)
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
            | Phase::Asking { .. }
            | Phase::LeaseWait { .. }
            | Phase::Syncing { .. } => self.hold(conn, || AckInput::of_line(line)),
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
            | Phase::Asking { .. }
            | Phase::LeaseWait { .. }
            | Phase::Syncing { .. } => self.hold(conn, || AckInput::NotAck(message.to_owned())),
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
                self.conns.unwatch(conn);
                self.log(conn, "dropped", "status wait's peer closed", now);
                self.finish(conn);
            }
            // The asker stopped waiting: its request closes (design §6).
            Phase::Asking { .. } => {
                self.prompt_gone(conn);
                self.log(conn, "dropped", "permission prompt's peer closed", now);
                self.finish(conn);
            }
            // A waiting claim's client gave up: it leaves the queue (lease design §A.2).
            Phase::LeaseWait { waiter } => {
                let waiter = waiter.clone();
                self.end_lease_wait(&waiter, crate::hub::leases::WaitEnd::Closed, now);
                self.log(conn, "dropped", "waiting lease claim's peer closed", now);
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
        self.conns.stranger_left(&mut self.outputs, conn, now);
        let Some(mut c) = self.conns.remove(&conn) else {
            return;
        };
        match std::mem::replace(&mut c.phase, Phase::Done) {
            Phase::Parked { parked, .. } => {
                self.router.unpark(&parked);
                Conns::log_conn(&mut self.outputs, &c, conn, "dropped", reason, now);
            }
            Phase::StatusWait { sender, id, .. } => {
                self.conns.unwatch_key(conn, &sender, &id);
                Conns::log_conn(&mut self.outputs, &c, conn, "dropped", reason, now);
            }
            Phase::Asking { task, seq } => {
                if self.conns.take_asking(&task, seq) == Some(conn) {
                    self.prompt_closed(&task, seq);
                }
                Conns::log_conn(&mut self.outputs, &c, conn, "dropped", reason, now);
            }
            Phase::LeaseWait { waiter } => {
                self.end_lease_wait(&waiter, crate::hub::leases::WaitEnd::Closed, now);
                Conns::log_conn(&mut self.outputs, &c, conn, "dropped", reason, now);
            }
            Phase::Staged => {
                // The sender never saw `accepted`, so the send must not happen.
                if let Some(s) = self.commit.unstage_send_of(conn) {
                    self.unstage(
                        s,
                        &format!("sender went away before the commit: {reason}"),
                        now,
                    );
                    Conns::log_conn(&mut self.outputs, &c, conn, "cancelled", reason, now);
                } else if let Some(t) = self.commit.unstage_reply_to(conn) {
                    // A delegation never answered `delegated` must not run either, nor an
                    // answer never answered `answered` reach the agent: its request is open
                    // again.
                    match (t.then, self.tasks.as_mut()) {
                        (TaskThen::Reply { task, .. }, Some(book)) => {
                            book.withdraw(&task);
                        }
                        (TaskThen::Answer { request, .. }, Some(_)) => {
                            let (mut work, out) = self.task_work();
                            if let Some(book) = work.book.as_deref_mut() {
                                book.answer_settled(&request, false, None);
                            }
                            work.drain(out);
                        }
                        // A grant nobody heard of: taken back, what it held given on.
                        (TaskThen::Lease(g), _) => {
                            self.leases.forget_grant(*g, now, &mut *self.ids);
                            self.stage_leases(now);
                        }
                        _ => {}
                    }
                    Conns::log_conn(&mut self.outputs, &c, conn, "cancelled", reason, now);
                } else {
                    // Its batch is being written: the batch's result decides, unanswered.
                    let detail = format!("closed while its send was being committed: {reason}");
                    Conns::log_conn(&mut self.outputs, &c, conn, "closed", &detail, now);
                }
            }
            Phase::Delivering {
                env,
                ack: true,
                committed,
            } => {
                Conns::log_conn(&mut self.outputs, &c, conn, "requeued", reason, now);
                self.give_back(conn, *env, reason, committed, now);
            }
            Phase::Delivering {
                env,
                committed: false,
                ..
            } => {
                Conns::log_conn(&mut self.outputs, &c, conn, "requeued", reason, now);
                self.give_back(conn, *env, reason, false, now);
            }
            Phase::Delivering {
                env,
                committed: true,
                ..
            } if !flushed => {
                Conns::log_conn(&mut self.outputs, &c, conn, "lost", reason, now);
                self.lose(conn, *env, reason, now);
            }
            Phase::Delivering { .. } => {
                Conns::log_conn(&mut self.outputs, &c, conn, "delivered", "", now)
            }
            // An ack already read stands: the commit settles it without a reply.
            Phase::AckStaged => Conns::log_conn(&mut self.outputs, &c, conn, "acked", reason, now),
            // Committed, but the peer left before the flush let its reply go out.
            Phase::Syncing { outcome } => {
                let detail = format!("closed before the store's flush: {reason}");
                Conns::log_conn(&mut self.outputs, &c, conn, outcome, &detail, now)
            }
            Phase::Hello | Phase::Verb | Phase::Claimed { .. } | Phase::Replied | Phase::Done => {}
        }
    }

    /// Begins a clean shutdown: every connection not waiting on a commit or a delivery gets an
    /// error line and is closed; parked awaits consume nothing.
    pub fn shutdown(&mut self, now: Now) {
        self.conns.stop();
        let (mut work, out) = self.task_work();
        work.shutdown(out);
        for conn in self.conns.ids() {
            let Some(c) = self.conns.get(&conn) else {
                continue;
            };
            match &c.phase {
                Phase::Hello | Phase::Verb => self.fail(conn, "hub is shutting down", now),
                Phase::Parked { parked, .. } => {
                    let parked = parked.clone();
                    self.router.unpark(&parked);
                    self.fail(conn, "hub is shutting down; nothing was consumed", now);
                }
                Phase::StatusWait { .. } => {
                    self.conns.unwatch(conn);
                    self.fail(conn, "hub is shutting down", now);
                }
                // The prompt's request stays open; the next start closes it by the fallback.
                Phase::Asking { .. } => {
                    self.conns.unpark_asking(conn);
                    self.fail(conn, "hub is shutting down", now);
                }
                // Nothing was granted; the waiter leaves the queue.
                Phase::LeaseWait { waiter } => {
                    let waiter = waiter.clone();
                    self.end_lease_wait(&waiter, crate::hub::leases::WaitEnd::Shutdown, now);
                    self.fail(conn, "hub is shutting down; nothing was granted", now);
                }
                // Answered: close once the final line is written, without waiting for the
                // client's close (a plain delivery's outcome is still decided at the close).
                Phase::Replied | Phase::Delivering { ack: false, .. } => {
                    // Its answer linger (`Conns::flushed`), if running, ends with this close.
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
                    tasks::verify_identity(self.tasks.as_ref(), &h.name, &h.token)
                } else {
                    self.settings.roster.verify(&h.name, &h.token)
                };
                let cap = self.settings.limits.max_connections_per_agent();
                let out = &mut self.outputs;
                if verified && !self.conns.authenticated(out, conn, &h.name, cap) {
                    // The right credentials, but the name holds every connection it may
                    // (`limits.max_connections_per_agent`, SPEC §4.6): recorded as who it
                    // is, then refused.
                    if let Some(c) = self.conns.get_mut(&conn) {
                        c.name = Some(h.name.clone());
                    }
                    self.outputs
                        .audit(AuditEvent::Authenticated { conn, name: h.name });
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
                    self.presence.authenticated(&h.name, now);
                    self.set_deadline(
                        conn,
                        Some(crate::kernel::deadline::after(
                            now.mono,
                            self.settings.limits.verb_timeout(),
                        )),
                    );
                    self.outputs
                        .audit(AuditEvent::Authenticated { conn, name: h.name });
                    self.write(conn, &HubLine::Ok);
                } else {
                    // The name tried is recorded unless it holds a token (one sent in the
                    // wrong field), and only within the strangers' rate (`hub::strangers`).
                    let (roster, tasks) = (&self.settings.roster, self.tasks.as_ref());
                    let recordable = |tried: &str| strangers::recordable(tried, roster, tasks);
                    let out = &mut self.outputs;
                    self.conns.hello_failed(out, conn, h.name, &recordable, now);
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

    /// The verb line: handed to its verb (`hub::verbs`), with the machines it drives.
    fn on_verb_line(&mut self, conn: ConnId, line: &[u8], now: Now) {
        let line = match ClientLine::decode(line) {
            Err(e) => return self.fail(conn, &e.to_string(), now),
            Ok(ClientLine::Hello(_)) => {
                return self.fail(conn, "a second hello on one connection", now)
            }
            Ok(ClientLine::Ack(_)) => {
                return self.fail(conn, "an ack outside an acknowledged delivery", now)
            }
            Ok(line) => line,
        };
        self.conns.set_verb(conn, line.tag());
        let (conns, out) = (&mut self.conns, &mut self.outputs);
        match line {
            ClientLine::Send(env) => {
                let admit = Admit {
                    commit: &mut self.commit,
                    ledger: &self.memory.ledger,
                    router: &mut self.router,
                };
                let known = Known {
                    roster: &self.settings.roster,
                    forwarding: self.forwarding.as_ref(),
                    tasks: self.tasks.as_ref(),
                };
                verbs::send::handle(conns, out, admit, known, conn, env, now)
            }
            ClientLine::Await(req) => {
                let (router, liveness) = (&mut self.router, &mut self.presence.liveness);
                verbs::await_::handle(conns, out, router, liveness, &self.settings, conn, req, now)
            }
            ClientLine::Status(req) => {
                let max = self.settings.limits.max_status_waits;
                let at = status::Lookup {
                    memory: &self.memory,
                    router: &self.router,
                };
                status::handle(conns, out, at, max, conn, req, now)
            }
            ClientLine::Who(req) => {
                let asker = conns.get(&conn).and_then(|c| c.name.clone());
                let asker = asker.unwrap_or_default();
                let presence = verbs::who::answer(self.view(), &asker, req.wants_off_roster());
                self.reply(conn, &HubLine::Who(presence), "who", now)
            }
            ClientLine::Activity => {
                let asker = conns.asker(conn);
                match verbs::activity::answer(self.view(), &asker) {
                    Ok(activity) => self.reply(conn, &HubLine::Activity(activity), "activity", now),
                    Err(why) => self.fail(conn, why, now),
                }
            }
            ClientLine::Turn(req) => {
                let asker = conns.asker(conn);
                let (roster, router) = (&self.settings.roster, &self.router);
                let liveness = &mut self.presence.liveness;
                match verbs::turn::answer(liveness, roster, router, &asker, req, now) {
                    Ok((turn, entered_gone)) => {
                        self.reply(conn, &HubLine::Turn(turn), "turn", now);
                        // Its leases end with its session (lease design §A.5).
                        if entered_gone {
                            self.lease_owner_gone(&asker, crate::hub::leases::Gone::Holder, now);
                        }
                    }
                    Err(why) => self.fail(conn, why, now),
                }
            }
            ClientLine::Delegate(req) => {
                let work = TaskWork {
                    book: self.tasks.as_mut(),
                    ids: &mut *self.ids,
                    commit: &mut self.commit,
                    router: &mut self.router,
                    memory: &self.memory,
                };
                verbs::delegate::delegate(conns, out, work, conn, req, now)
            }
            ClientLine::TaskStatus(req) => {
                let book = self.tasks.as_ref();
                verbs::delegate::task_status(conns, out, book, conn, req, now)
            }
            ClientLine::Tasks => verbs::delegate::tasks(conns, out, self.tasks.as_ref(), conn, now),
            ClientLine::Cancel(req) => {
                let work = TaskWork {
                    book: self.tasks.as_mut(),
                    ids: &mut *self.ids,
                    commit: &mut self.commit,
                    router: &mut self.router,
                    memory: &self.memory,
                };
                verbs::delegate::cancel(conns, out, work, conn, req, now)
            }
            ClientLine::TaskAnswer(req) => {
                let work = TaskWork {
                    book: self.tasks.as_mut(),
                    ids: &mut *self.ids,
                    commit: &mut self.commit,
                    router: &mut self.router,
                    memory: &self.memory,
                };
                verbs::task_answer::handle(conns, out, work, conn, req, now)
            }
            ClientLine::Lease(req) => self.on_lease_line(conn, req, now),
            ClientLine::TaskPermission(req) => {
                let work = TaskWork {
                    book: self.tasks.as_mut(),
                    ids: &mut *self.ids,
                    commit: &mut self.commit,
                    router: &mut self.router,
                    memory: &self.memory,
                };
                verbs::task_permission::handle(conns, out, work, conn, req, now)
            }
            ClientLine::TaskPrompt(req) => {
                let work = TaskWork {
                    book: self.tasks.as_mut(),
                    ids: &mut *self.ids,
                    commit: &mut self.commit,
                    router: &mut self.router,
                    memory: &self.memory,
                };
                verbs::task_prompt::handle(conns, out, work, conn, req, now)
            }
            ClientLine::TaskClose(req) => {
                let work = TaskWork {
                    book: self.tasks.as_mut(),
                    ids: &mut *self.ids,
                    commit: &mut self.commit,
                    router: &mut self.router,
                    memory: &self.memory,
                };
                verbs::task_close::handle(conns, out, work, conn, req, now)
            }
            // Answered above.
            ClientLine::Hello(_) | ClientLine::Ack(_) => {}
        }
    }

    /// Writes the replies the book decided for parked permission prompts (design §6), each the
    /// final line of the connection that asked; a prompt whose asker has gone is dropped.
    /// Called at the loop's commit point (`handle_commit_point`), which every iteration
    /// reaches after its inputs, and after a batch's result (`handle_committed`, which settles
    /// answers), so a decision goes out in the iteration that made it.
    pub(super) fn answer_prompts(&mut self, now: Now) {
        let Some(book) = self.tasks.as_mut() else {
            return;
        };
        while let Some(a) = book.poll_prompt_answer() {
            let Some(conn) = self.conns.take_asking(a.task.as_str(), a.seq) else {
                continue;
            };
            let outcome = a.reply.behavior.as_str();
            let line = HubLine::TaskPermission(a.reply);
            self.conns
                .reply(&mut self.outputs, conn, &line, outcome, now);
        }
    }

    /// A lease verb (lease design §A, `verbs::lease`): handed to its file with the machines
    /// it drives.
    fn on_lease_line(&mut self, conn: ConnId, req: LeaseRequest, now: Now) {
        let (conns, out) = (&mut self.conns, &mut self.outputs);
        let work = LeaseWork {
            leases: &mut self.leases,
            commit: &mut self.commit,
            router: &mut self.router,
            ids: &mut *self.ids,
        };
        match req {
            LeaseRequest::Claim(r) => verbs::lease::claim::handle(conns, out, work, conn, r, now),
            LeaseRequest::Release(r) => {
                verbs::lease::release::handle(conns, out, work, conn, r, now)
            }
            LeaseRequest::Renew(r) => verbs::lease::renew::handle(conns, out, work, conn, r, now),
            LeaseRequest::List(r) => {
                verbs::lease::list::handle(conns, out, work.leases, conn, r, now)
            }
            LeaseRequest::Break(r) => {
                let operator = self.settings.sees_everything(&conns.asker(conn));
                verbs::lease::break_::handle(conns, out, work, operator, conn, r, now)
            }
            LeaseRequest::Check(r) => {
                let book = self.tasks.as_ref();
                let live = |t: &str| book.is_some_and(|b| b.is_live_task(t));
                verbs::lease::check::handle(conns, out, work.leases, &live, conn, r, now)
            }
        }
    }

    /// Carries out what the lease machine queued (`verbs::lease::LeaseWork::stage`).
    pub(super) fn stage_leases(&mut self, now: Now) {
        let mut work = LeaseWork {
            leases: &mut self.leases,
            commit: &mut self.commit,
            router: &mut self.router,
            ids: &mut *self.ids,
        };
        work.stage(&mut self.conns, &mut self.outputs, now);
    }

    /// Waiter `waiter` (parked on its connection) stops waiting (`why`): the machine drops it and grants what
    /// its place blocked; the `timeout` reply, for the caller to send or drop.
    pub(super) fn end_lease_wait(
        &mut self,
        waiter: &str,
        why: crate::hub::leases::WaitEnd,
        now: Now,
    ) -> Option<crate::wire::lease::LeaseClaimReply> {
        let reply = self.leases.end_wait(waiter, why, now, &mut *self.ids);
        self.stage_leases(now);
        reply
    }

    /// `owner` went `gone` or its task ended (lease design §A.5): its leases end, and what
    /// they blocked is granted.
    pub(super) fn lease_owner_gone(
        &mut self,
        owner: &str,
        why: crate::hub::leases::Gone,
        now: Now,
    ) {
        if !self.leases.involves(owner) {
            return;
        }
        self.leases.owner_gone(owner, why, now, &mut *self.ids);
        self.stage_leases(now);
    }

    /// A parked prompt's connection ended before its reply: the book closes its request.
    fn prompt_gone(&mut self, conn: ConnId) {
        if let Some((task, seq)) = self.conns.unpark_asking(conn) {
            self.prompt_closed(&task, seq);
        }
    }

    fn prompt_closed(&mut self, task: &str, seq: u32) {
        let (mut work, out) = self.task_work();
        if let Some(book) = work.book.as_deref_mut() {
            book.prompt_gone(task, seq);
        }
        work.drain(out);
    }

    /// Expires every connection deadline at or before `now` (from `handle_timeout`): a hello
    /// or verb not sent in time, a parked await's timeout, a status wait's, an ack not sent in
    /// time, the end of an answer linger.
    pub(super) fn expire_conns(&mut self, now: Now) {
        while let Some(conn) = self.conns.pop_expired(now) {
            let Some(c) = self.conns.get(&conn) else {
                continue;
            };
            match &c.phase {
                Phase::Hello => {
                    let msg = format!(
                        "no hello within {} ms",
                        self.settings.limits.hello_timeout_ms
                    );
                    self.fail(conn, &msg, now);
                }
                Phase::Verb => {
                    let msg = format!("no verb within {} ms", self.settings.limits.verb_timeout_ms);
                    self.fail(conn, &msg, now);
                }
                Phase::Parked { parked, .. } => {
                    let parked = parked.clone();
                    self.router.unpark(&parked);
                    let name = parked.agent;
                    self.outputs.audit(AuditEvent::Timeout { conn, name });
                    self.reply(conn, &HubLine::Timeout, "timeout", now);
                }
                Phase::StatusWait { .. } => {
                    let at = status::Lookup {
                        memory: &self.memory,
                        router: &self.router,
                    };
                    status::timed_out(&mut self.conns, &mut self.outputs, at, conn, now)
                }
                Phase::Delivering { ack: true, .. } => {
                    let msg = format!(
                        "no ack within {} ms; the envelope will be delivered again",
                        self.settings.limits.ack_timeout_ms
                    );
                    self.return_unacked(conn, &msg, now);
                }
                // A waiting claim's `timeoutSecs` passed: nothing granted (lease design §A.2).
                Phase::LeaseWait { waiter } => {
                    let (waiter, wait_end) = (waiter.clone(), crate::hub::leases::WaitEnd::Timeout);
                    match self.end_lease_wait(&waiter, wait_end, now) {
                        Some(r) => {
                            let line =
                                HubLine::Lease(crate::wire::lease::LeaseReply::Claim(Box::new(r)));
                            self.reply(conn, &line, "timeout", now);
                        }
                        None => self.fail(conn, "lease_claim: the waiting claim was lost", now),
                    }
                }
                phase if conns::answered(phase) => self.conns.linger_over(&mut self.outputs, conn),
                _ => {}
            }
        }
    }

    /// Every byte the connection was given up to and including its final line (after
    /// `Output::Answered`) is in the kernel. Starts the answer linger, or ends the exchange
    /// now when `limits.answer_linger_ms` is 0 (`Conns::flushed`, SPEC §4.3, §4.4).
    pub fn handle_flushed(&mut self, conn: ConnId, now: Now) {
        let linger = self.settings.limits.answer_linger();
        self.conns.flushed(&mut self.outputs, conn, linger, now);
    }

    // ----- the connection helpers, for the glue (`Conns` has them) -----

    pub(super) fn write(&mut self, conn: ConnId, line: &HubLine) {
        self.conns.write(&mut self.outputs, conn, line);
    }

    /// Sends the connection's final line; the exchange is over (`Conns::end_exchange`).
    pub(super) fn reply(&mut self, conn: ConnId, line: &HubLine, outcome: &str, now: Now) {
        self.conns
            .reply(&mut self.outputs, conn, line, outcome, now);
    }

    /// Sends an error line (always the last line) and closes.
    pub(super) fn fail(&mut self, conn: ConnId, message: &str, now: Now) {
        self.conns.fail(&mut self.outputs, conn, message, now);
    }

    pub(super) fn finish(&mut self, conn: ConnId) {
        self.conns.finish(&mut self.outputs, conn);
    }

    pub(super) fn push_close(&mut self, conn: ConnId, linger: bool) {
        self.conns.push_close(&mut self.outputs, conn, linger);
    }

    pub(super) fn set_deadline(&mut self, conn: ConnId, deadline: Option<Instant>) {
        self.conns.set_deadline(conn, deadline);
    }

    pub(super) fn log(&mut self, conn: ConnId, outcome: &str, detail: &str, now: Now) {
        self.conns
            .log(&mut self.outputs, conn, outcome, detail, now);
    }

    pub(super) fn hold(&mut self, conn: ConnId, summary: impl FnOnce() -> AckInput) {
        self.conns.hold(conn, summary);
    }
}
