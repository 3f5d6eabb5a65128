//! The state machine of one headless agent process (docs/delegation.md "Headless tasks"):
//! sans-IO, every instant passed in.
//!
//! Inputs: the process's exit (`handle_exit`), the end of its stdout (`handle_eof`), the
//! caller's cancel (`cancel`), time (`handle_timeout`). Outputs: `poll_event` (signals for
//! the whole process group, then one `Finished` with the run's `Ending`), `poll_timeout` (the
//! next instant something is due). Owns: the task's deadline, TERM then KILL after
//! `term_grace_ms` on a cancel or a timeout (the same escalation as the ACP session's
//! shutdown, docs/acp.md), waiting for both the exit and the end of stdout, and what happens
//! when only one of them comes. Refuses: parsing the output (`outcome`), and signalling a
//! group after its leader was reaped, except once when the leader is gone but its stdout is
//! still held open (some member of the group still runs, so the group id is still theirs).

use crate::acp::{ExitStatus, Signal};
use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// The deadlines of a headless run (from the `[tasks]` limits the ACP session also uses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeadlessLimits {
    /// The task's budget from the start.
    pub task_timeout_ms: u64,
    /// After SIGTERM to the group, wait this long before SIGKILL.
    pub term_grace_ms: u64,
    /// After the exit, wait this long for the end of stdout (and after the end of stdout,
    /// this long for the exit) before deciding without it.
    pub eof_exit_wait_ms: u64,
}

/// Why the run was stopped by us; the first cause wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cause {
    /// The caller cancelled.
    Caller,
    /// The task's deadline passed.
    Deadline,
    /// The agent closed its stdout and did not exit within `eof_exit_wait_ms`.
    OutputClosed,
}

/// How the run ended: the input of `outcome::build`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ending {
    /// Set when we stopped the agent.
    pub cause: Option<Cause>,
    /// The leader's exit status.
    pub exit: ExitStatus,
    /// False when stdout was still open `eof_exit_wait_ms` after the exit (a member of the
    /// group held it): what was read until then is all there is.
    pub stdout_complete: bool,
    pub elapsed_ms: u64,
    /// The limits, for reasons that quote them.
    pub limits: HeadlessLimits,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// Send this signal to the agent's whole process group.
    Signal(Signal),
    /// The run is over (the leader was reaped): build the outcome. Always last.
    Finished(Ending),
}

/// One headless run. See the module doc.
#[derive(Debug)]
pub struct Run {
    limits: HeadlessLimits,
    start: Instant,
    deadline: Instant,
    cause: Option<Cause>,
    /// When SIGKILL is due after the SIGTERM.
    kill_at: Option<Instant>,
    killed: bool,
    exit: Option<(ExitStatus, Instant)>,
    eof: Option<Instant>,
    events: VecDeque<Event>,
    finished: bool,
}

fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}

impl Run {
    /// A run whose process was spawned at `now`.
    pub fn new(limits: HeadlessLimits, now: Instant) -> Run {
        Run {
            limits,
            start: now,
            deadline: now + ms(limits.task_timeout_ms),
            cause: None,
            kill_at: None,
            killed: false,
            exit: None,
            eof: None,
            events: VecDeque::new(),
            finished: false,
        }
    }

    /// The caller asks the run to stop: SIGTERM to the group now, SIGKILL after the grace.
    /// False (nothing done) once the leader exited or another cause already stopped it: an
    /// agent that had already ended keeps its outcome (docs/delegation.md, cancel racing
    /// completion).
    pub fn cancel(&mut self, now: Instant) -> bool {
        self.stop(Cause::Caller, now)
    }

    fn stop(&mut self, cause: Cause, now: Instant) -> bool {
        if self.finished || self.exit.is_some() || self.cause.is_some() {
            return false;
        }
        self.cause = Some(cause);
        self.events.push_back(Event::Signal(Signal::Term));
        self.kill_at = Some(now + ms(self.limits.term_grace_ms));
        true
    }

    /// The leader exited (the reaper saw it).
    pub fn handle_exit(&mut self, status: ExitStatus, now: Instant) {
        if self.finished || self.exit.is_some() {
            return;
        }
        self.exit = Some((status, now));
        if self.eof.is_some() {
            self.finish(true, now);
        }
    }

    /// The agent's stdout reached its end (every byte was read, kept or not).
    pub fn handle_eof(&mut self, now: Instant) {
        if self.finished || self.eof.is_some() {
            return;
        }
        self.eof = Some(now);
        if self.exit.is_some() {
            self.finish(true, now);
        }
    }

    /// Runs whatever is due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.finished {
            return;
        }
        if let Some((_, exited)) = self.exit {
            if self.eof.is_none() && now >= exited + ms(self.limits.eof_exit_wait_ms) {
                // The leader is gone but its stdout is still open: a member of its group
                // holds it, so the group still exists and is still the agent's.
                self.events.push_back(Event::Signal(Signal::Kill));
                self.finish(false, now);
            }
            return;
        }
        if now >= self.deadline {
            self.stop(Cause::Deadline, now);
        }
        if let Some(eof) = self.eof {
            if now >= eof + ms(self.limits.eof_exit_wait_ms) {
                self.stop(Cause::OutputClosed, now);
            }
        }
        if let Some(at) = self.kill_at {
            if !self.killed && now >= at {
                self.killed = true;
                self.events.push_back(Event::Signal(Signal::Kill));
            }
        }
    }

    fn finish(&mut self, stdout_complete: bool, now: Instant) {
        let Some((exit, _)) = self.exit else {
            return;
        };
        self.finished = true;
        self.events.push_back(Event::Finished(Ending {
            cause: self.cause,
            exit,
            stdout_complete,
            elapsed_ms: u64::try_from(now.saturating_duration_since(self.start).as_millis())
                .unwrap_or(u64::MAX),
            limits: self.limits,
        }));
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The next instant `handle_timeout` has something to do; None once finished, or when
    /// only an input can move the run on.
    pub fn poll_timeout(&self) -> Option<Instant> {
        if self.finished {
            return None;
        }
        if let Some((_, exited)) = self.exit {
            return self
                .eof
                .is_none()
                .then(|| exited + ms(self.limits.eof_exit_wait_ms));
        }
        let mut due = Vec::with_capacity(3);
        if self.cause.is_none() {
            due.push(self.deadline);
            if let Some(eof) = self.eof {
                due.push(eof + ms(self.limits.eof_exit_wait_ms));
            }
        }
        if let (Some(at), false) = (self.kill_at, self.killed) {
            due.push(at);
        }
        due.into_iter().min()
    }

    pub fn is_finished(&self) -> bool {
        self.finished
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: HeadlessLimits = HeadlessLimits {
        task_timeout_ms: 10_000,
        term_grace_ms: 500,
        eof_exit_wait_ms: 200,
    };

    fn drain(r: &mut Run) -> Vec<Event> {
        std::iter::from_fn(|| r.poll_event()).collect()
    }

    fn at(t0: Instant, ms_: u64) -> Instant {
        t0 + ms(ms_)
    }

    #[test]
    fn exit_and_eof_in_either_order_finish_once() {
        let t0 = crate::kernel::deadline::test_origin();
        for eof_first in [true, false] {
            let mut r = Run::new(LIMITS, t0);
            if eof_first {
                r.handle_eof(at(t0, 10));
                assert!(drain(&mut r).is_empty());
                r.handle_exit(ExitStatus::code(0), at(t0, 20));
            } else {
                r.handle_exit(ExitStatus::code(0), at(t0, 10));
                assert!(drain(&mut r).is_empty());
                r.handle_eof(at(t0, 20));
            }
            let evs = drain(&mut r);
            assert_eq!(evs.len(), 1);
            let Event::Finished(e) = &evs[0] else {
                panic!("{evs:?}")
            };
            assert_eq!(e.cause, None);
            assert!(e.stdout_complete);
            assert_eq!(e.elapsed_ms, 20);
            assert_eq!(r.poll_timeout(), None);
            r.handle_exit(ExitStatus::code(1), at(t0, 30));
            r.handle_timeout(at(t0, 99_999));
            assert!(drain(&mut r).is_empty(), "nothing after Finished");
        }
    }

    #[test]
    fn the_deadline_terms_then_kills_the_group() {
        let t0 = crate::kernel::deadline::test_origin();
        let mut r = Run::new(LIMITS, t0);
        assert_eq!(r.poll_timeout(), Some(at(t0, 10_000)));
        r.handle_timeout(at(t0, 9_999));
        assert!(drain(&mut r).is_empty());
        r.handle_timeout(at(t0, 10_000));
        assert_eq!(drain(&mut r), [Event::Signal(Signal::Term)]);
        assert_eq!(r.poll_timeout(), Some(at(t0, 10_500)));
        r.handle_timeout(at(t0, 10_499));
        assert!(drain(&mut r).is_empty());
        r.handle_timeout(at(t0, 10_500));
        assert_eq!(drain(&mut r), [Event::Signal(Signal::Kill)]);
        assert_eq!(r.poll_timeout(), None, "only the exit can come now");
        r.handle_eof(at(t0, 10_501));
        r.handle_exit(ExitStatus::signal(9), at(t0, 10_502));
        let evs = drain(&mut r);
        let [Event::Finished(e)] = &evs[..] else {
            panic!("{evs:?}")
        };
        assert_eq!(e.cause, Some(Cause::Deadline));
        assert_eq!(e.exit, ExitStatus::signal(9));
    }

    #[test]
    fn a_cancel_terms_at_once_and_a_polite_agent_is_not_killed() {
        let t0 = crate::kernel::deadline::test_origin();
        let mut r = Run::new(LIMITS, t0);
        assert!(r.cancel(at(t0, 100)));
        assert!(!r.cancel(at(t0, 101)), "a second cancel changes nothing");
        assert_eq!(drain(&mut r), [Event::Signal(Signal::Term)]);
        r.handle_exit(ExitStatus::signal(15), at(t0, 150));
        r.handle_eof(at(t0, 151));
        let evs = drain(&mut r);
        let [Event::Finished(e)] = &evs[..] else {
            panic!("{evs:?}")
        };
        assert_eq!(e.cause, Some(Cause::Caller));
        // The deadline passing later changes nothing either.
        r.handle_timeout(at(t0, 20_000));
        assert!(drain(&mut r).is_empty());
    }

    #[test]
    fn a_cancel_after_the_exit_keeps_the_outcome() {
        let t0 = crate::kernel::deadline::test_origin();
        let mut r = Run::new(LIMITS, t0);
        r.handle_exit(ExitStatus::code(0), at(t0, 5));
        assert!(!r.cancel(at(t0, 6)));
        r.handle_eof(at(t0, 7));
        let evs = drain(&mut r);
        let [Event::Finished(e)] = &evs[..] else {
            panic!("{evs:?}")
        };
        assert_eq!(e.cause, None);
    }

    #[test]
    fn stdout_held_open_after_the_exit_kills_the_leftovers_once() {
        let t0 = crate::kernel::deadline::test_origin();
        let mut r = Run::new(LIMITS, t0);
        r.handle_exit(ExitStatus::code(0), at(t0, 1_000));
        assert_eq!(r.poll_timeout(), Some(at(t0, 1_200)));
        r.handle_timeout(at(t0, 1_199));
        assert!(drain(&mut r).is_empty());
        r.handle_timeout(at(t0, 1_200));
        let evs = drain(&mut r);
        assert_eq!(evs[0], Event::Signal(Signal::Kill));
        let Event::Finished(e) = &evs[1] else {
            panic!("{evs:?}")
        };
        assert!(!e.stdout_complete);
        assert_eq!(e.cause, None);
        assert_eq!(evs.len(), 2);
    }

    #[test]
    fn closed_output_without_an_exit_is_stopped() {
        let t0 = crate::kernel::deadline::test_origin();
        let mut r = Run::new(LIMITS, t0);
        r.handle_eof(at(t0, 100));
        assert_eq!(r.poll_timeout(), Some(at(t0, 300)));
        r.handle_timeout(at(t0, 300));
        assert_eq!(drain(&mut r), [Event::Signal(Signal::Term)]);
        r.handle_timeout(at(t0, 800));
        assert_eq!(drain(&mut r), [Event::Signal(Signal::Kill)]);
        r.handle_exit(ExitStatus::signal(9), at(t0, 801));
        let evs = drain(&mut r);
        let [Event::Finished(e)] = &evs[..] else {
            panic!("{evs:?}")
        };
        assert_eq!(e.cause, Some(Cause::OutputClosed));
        assert!(e.stdout_complete);
    }

    #[test]
    fn a_zero_grace_kills_at_the_next_tick() {
        let t0 = crate::kernel::deadline::test_origin();
        let mut r = Run::new(
            HeadlessLimits {
                term_grace_ms: 0,
                ..LIMITS
            },
            t0,
        );
        r.cancel(t0);
        r.handle_timeout(t0);
        assert_eq!(
            drain(&mut r),
            [Event::Signal(Signal::Term), Event::Signal(Signal::Kill)]
        );
    }
}
