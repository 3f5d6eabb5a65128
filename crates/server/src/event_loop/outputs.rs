//! The core's outputs applied (part of the IO shell, `event_loop/mod.rs`; PLAN.md §1 step 4):
//! each `Output` handed to the part that carries it out (a connection's buffer, the record
//! files, the commit executor, the task executor, the relay), the commit point at the end of
//! an iteration, flushing dirty sockets with the first accepted byte of a delivery reported,
//! the IO deadlines, and closing, which always tells the core. Refuses: deciding anything the
//! outputs do not say.

use super::conn::Flush;
use super::{delegation, liveness, read_clock, Server};
use agent_hub_proto::hub::{ConnId, Output};
use agent_hub_proto::kernel::now::Now;
use mio::{Interest, Token};
use std::net::Shutdown;

impl Server {
    pub(super) fn drain_outputs(&mut self) {
        while let Some(out) = self.hub.poll_output() {
            match out {
                Output::Write { conn, line } => {
                    if let Some(c) = self.conns.map.get_mut(&conn) {
                        c.queue_line(line);
                        self.conns.dirty.push(conn);
                    }
                }
                Output::Handoff { conn, line } => {
                    if let Some(c) = self.conns.map.get_mut(&conn) {
                        c.queue_delivery(line);
                        self.conns.dirty.push(conn);
                    }
                }
                Output::Answered { conn } => {
                    if let Some(c) = self.conns.map.get_mut(&conn) {
                        c.closing = true;
                        c.answered = true;
                        self.conns.dirty.push(conn);
                    }
                }
                Output::Close { conn, linger } => {
                    if let Some(c) = self.conns.map.get_mut(&conn) {
                        c.closing = true;
                        c.linger |= linger;
                        c.discard_input = true;
                        c.answered = false;
                        c.waiting_for_close = false;
                        self.conns.dirty.push(conn);
                    }
                }
                Output::Audit(ev) => self.records.audit(&ev),
                Output::Log(line) => self.records.log("INFO", &line),
                Output::StartTask(spec) => self.tasks.start(*spec, &mut self.records),
                Output::CancelTask { task } => self.tasks.cancel(task.as_str()),
                Output::PromptTask {
                    task,
                    turn,
                    text,
                    interrupt,
                } => self
                    .tasks
                    .prompt(task.as_str(), turn, text, interrupt, &mut self.records),
                Output::CloseTask { task } => self.tasks.close(task.as_str()),
                Output::AnswerTask { task, seq, answer } => {
                    self.tasks
                        .answer(task.as_str(), seq, answer, &mut self.records)
                }
                Output::KillOrphan { task, pid } => {
                    delegation::kill_orphan(&task, pid, &mut self.records)
                }
                Output::LogError(line) => self.records.log("ERROR", &line),
                Output::Commit(batch) => {
                    self.commits
                        .write_batch(batch, &mut self.records, &mut self.hub)
                }
                Output::CheckProcesses(watched) => {
                    // A handful of /proc reads per second (one per watched name).
                    let now = read_clock();
                    for (name, p) in watched {
                        if !liveness::still_runs(p) {
                            self.hub.handle_process_exited(&name, p, now);
                        }
                    }
                    self.hub.handle_processes_checked(now);
                }
                out @ (Output::Forward { .. } | Output::ForwardAck { .. } | Output::ToPeer(_)) => {
                    self.relay.park(out)
                }
            }
        }
    }

    /// End of an iteration: the core's commit point (it emits the batch to write, if any),
    /// then every dirty socket written, repeating while those writes produce more work
    /// (requeues, bounces).
    pub(super) fn settle(&mut self, now: Now) {
        loop {
            self.drain_outputs();
            if self.exchange_with_relay(now) {
                continue;
            }
            let holds = self.commits.holds_commits();
            self.hub.handle_commit_point(now, holds);
            self.drain_outputs();
            let Some(batch) = self.conns.take_dirty() else {
                break;
            };
            for &id in &batch {
                self.flush_conn(id, now);
            }
            self.conns.done_flushing(batch);
        }
        let _ = self.records.flush_audit(std::iter::empty());
        self.records.flush_due(now.mono);
    }

    fn flush_conn(&mut self, id: ConnId, now: Now) {
        let Some(conn) = self.conns.map.get_mut(&id) else {
            return;
        };
        if conn.delivery_unstarted() && conn.peer_gone() {
            // Never write a delivery into a socket whose reader is gone (SPEC §5.4).
            self.close(id, false, "reader gone before delivery", now);
            return;
        }
        let hub = &mut self.hub;
        match conn.flush(|| hub.handle_delivery_committed(id, now)) {
            Flush::Done => {
                self.conns.set_io_deadline(id, None);
                // Still there: flushing wrote, it closed nothing.
                let conn = self.conns.map.get_mut(&id).expect("flushed conn exists");
                if conn.writable_interest {
                    conn.writable_interest = false;
                    let _ = self.poll.registry().reregister(
                        &mut conn.stream,
                        Token(id as usize),
                        Interest::READABLE,
                    );
                }
                if conn.closing {
                    self.finish_close(id, now);
                }
            }
            Flush::Blocked => {
                if !conn.writable_interest {
                    conn.writable_interest = true;
                    let interest = Interest::READABLE | Interest::WRITABLE;
                    let _ = self.poll.registry().reregister(
                        &mut conn.stream,
                        Token(id as usize),
                        interest,
                    );
                }
                if conn.deadline.is_none() {
                    let at = agent_hub_proto::kernel::deadline::after(
                        now.mono,
                        self.limits.write_timeout(),
                    );
                    self.conns.set_io_deadline(id, Some(at));
                }
            }
            Flush::Failed(e) => self.close(id, false, &format!("write failed: {e}"), now),
        }
    }

    /// Output is flushed and the core is done: close now, linger for the peer's EOF after the
    /// core's `Close { linger: true }` so unread input does not turn our close into a reset,
    /// or, after `Answered`, report the flush to the core and wait for what it decides.
    fn finish_close(&mut self, id: ConnId, now: Now) {
        let Some(conn) = self.conns.map.get_mut(&id) else {
            return;
        };
        if conn.linger && !conn.read_eof {
            if !conn.shut_down {
                conn.shut_down = true;
                let _ = conn.stream.shutdown(Shutdown::Write);
                let at =
                    agent_hub_proto::kernel::deadline::after(now.mono, self.limits.hello_timeout());
                self.conns.set_io_deadline(id, Some(at));
            }
            return;
        }
        if conn.answered && !conn.read_eof {
            // The reply is in the kernel: the core decides how long the client's lines are
            // still taken and when this side ends (the answer linger, `hub::conns`, SPEC §4.3); its `Close`
            // arrives at once or from `handle_timeout`.
            if !std::mem::replace(&mut conn.waiting_for_close, true) {
                if self.limits.answer_linger_ms == 0 {
                    // No linger: the exchange ends now. Whatever the client wrote that is
                    // already here is read first, so a line that arrived before the reply
                    // went out is answered `a line after the verb` (SPEC §4.3) however the
                    // client's writes were split and whether or not its readiness event was
                    // handled yet. One read; it usually finds nothing (WouldBlock).
                    self.read(id, false, now);
                    let still_answered = self
                        .conns
                        .map
                        .get(&id)
                        .is_some_and(|c| c.answered && !c.read_eof);
                    if !still_answered {
                        // That line was answered (its error and close are queued), or the
                        // client closed and the read released the connection.
                        return;
                    }
                }
                self.hub.handle_flushed(id, now);
                self.drain_outputs();
            }
            return;
        }
        self.close(id, true, "closed", now);
    }

    pub(super) fn expire_io_deadlines(&mut self, now: Now) {
        while let Some((id, shut_down)) = self.conns.next_expired(now.mono) {
            if shut_down {
                self.close(id, true, "closed after linger", now);
            } else {
                let msg = format!(
                    "write deadline of {} ms passed",
                    self.limits.write_timeout_ms
                );
                self.close(id, false, &msg, now);
            }
        }
    }

    /// Releases the socket and tells the core. `flushed` is false when output was left
    /// unwritten, which the core turns into a requeue or a loss.
    pub(super) fn close(&mut self, id: ConnId, flushed: bool, reason: &str, now: Now) {
        #[allow(unused_mut)]
        let Some(mut conn) = self.conns.remove(id) else {
            return;
        };
        // On Linux closing the descriptor removes it from epoll; skip the extra epoll_ctl.
        #[cfg(not(target_os = "linux"))]
        let _ = self.poll.registry().deregister(&mut conn.stream);
        let flushed = match conn.delivery {
            // A delivery line the kernel took in full was delivered, whatever came after it.
            Some(d) => d.done,
            None => flushed && !conn.has_output(),
        };
        drop(conn);
        self.hub.handle_closed(id, flushed, reason, now);
        self.drain_outputs();
    }
}
