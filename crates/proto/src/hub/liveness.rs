//! Liveness (SPEC §14): per roster name, what the hub knows of its agent's process — busy in
//! a turn, idle, gone — from the `turn` reports of its hooks, when it entered that state, and
//! which process the hub watches for it; and the periodic check of those processes, asked of
//! the IO layer as `Output::CheckProcesses` and answered with `Hub::handle_process_exited`.
//!
//! A parked await outranks all of it (`waiting`), and a name the hub knows nothing about is
//! `unknown`: nothing here is inferred from silence. One process per name: the newest report
//! names the process that is watched, and a report about any other pid cannot end it, so a
//! name's state follows the session that spoke last (issue 12 gives each agent its own
//! identity). A pid reported by one name only ever affects that name: the caller is the
//! authenticated name, never a field of the line. Refuses IO: the hub watches processes only
//! through the loop's reports and never signals one.

use super::event::{Output, WatchedProcess};
use super::outbox::Outbox;
use super::router::Router;
use crate::kernel::fold_hash::FoldMap;
use crate::kernel::now::Now;
use crate::roster::Roster;
use crate::wire::UNKNOWN_STATE;
use std::time::{Duration, Instant};

/// How often the watched processes are checked while there are any: `who` shows an exit
/// within about this long.
pub const PROCESS_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// A turn state a hook reported, or `Gone` from a report or an exit the loop saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnState {
    Busy,
    Idle,
    Gone,
}

impl TurnState {
    pub fn as_str(self) -> &'static str {
        match self {
            TurnState::Busy => "busy",
            TurnState::Idle => "idle",
            TurnState::Gone => "gone",
        }
    }

    pub(super) fn parse(s: &str) -> Option<TurnState> {
        match s {
            "busy" => Some(TurnState::Busy),
            "idle" => Some(TurnState::Idle),
            "gone" => Some(TurnState::Gone),
            _ => None,
        }
    }
}

/// Where a state came from (the `source` of SPEC §14).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// A parked await.
    Await,
    /// A `turn` line from the agent's hooks.
    Hook,
    /// The loop saw the watched process exit.
    Process,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Await => "await",
            Source::Hook => "hook",
            Source::Process => "process",
        }
    }
}

/// One name's known state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Known {
    pub state: TurnState,
    /// Wall time (unix ms) it entered `state`.
    pub since_ms: i64,
    pub source: Source,
    /// The process watched for the name, while not `Gone`.
    pub process: Option<WatchedProcess>,
}

/// The liveness book: per roster name, its known state and when it last had no parked await.
#[derive(Debug, Default)]
pub struct Liveness {
    known: FoldMap<String, Known>,
    /// Per name, when its current run of parked awaits began (unix ms).
    waiting_since: FoldMap<String, i64>,
    /// When the watched processes are next checked; None while none is watched.
    next_check: Option<Instant>,
    /// A check is out and its report not yet in: no second one is asked for meanwhile.
    checking: bool,
}

impl Liveness {
    pub fn known(&self, name: &str) -> Option<&Known> {
        self.known.get(name)
    }

    pub fn waiting_since(&self, name: &str) -> Option<i64> {
        self.waiting_since.get(name).copied()
    }

    /// Every process watched, by name.
    pub fn watched(&self) -> Vec<(String, WatchedProcess)> {
        let mut v: Vec<(String, WatchedProcess)> = self
            .known
            .iter()
            .filter_map(|(n, k)| k.process.map(|p| (n.clone(), p)))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// Records a report from `name`. A report without a pid keeps the watched process if it
    /// is the same state change of the same session; one with a pid replaces it. A `gone`
    /// about another pid than the watched one says nothing about the watched process.
    /// Returns whether `name` entered `gone` with it (its leases end, lease design §A.5).
    pub(super) fn report(
        &mut self,
        name: &str,
        state: TurnState,
        process: Option<WatchedProcess>,
        now: Now,
    ) -> bool {
        let now_ms = now.wall.timestamp_millis();
        let prev = self.known.get(name);
        let was_gone = prev.is_some_and(|k| k.state == TurnState::Gone);
        if state == TurnState::Gone {
            if let (Some(p), Some(k)) = (process, prev) {
                if k.process.is_some_and(|w| w.pid != p.pid) && k.state != TurnState::Gone {
                    return false;
                }
            }
        }
        let since_ms = match prev {
            Some(k) if k.state == state => k.since_ms,
            _ => now_ms,
        };
        let watched = match state {
            TurnState::Gone => None,
            _ => process.or_else(|| prev.and_then(|k| k.process)),
        };
        self.known.insert(
            name.to_owned(),
            Known {
                state,
                since_ms,
                source: Source::Hook,
                process: watched,
            },
        );
        if watched.is_some() && self.next_check.is_none() && !self.checking {
            self.next_check = Some(crate::kernel::deadline::after(
                now.mono,
                PROCESS_CHECK_INTERVAL,
            ));
        }
        state == TurnState::Gone && !was_gone
    }

    /// The loop saw `process` (watched for `name`) gone. A report about a process no longer
    /// watched for the name (a newer session reported meanwhile) changes nothing.
    fn exited(&mut self, name: &str, process: WatchedProcess, now: Now) -> bool {
        let Some(k) = self.known.get_mut(name) else {
            return false;
        };
        if k.process != Some(process) {
            return false;
        }
        k.state = TurnState::Gone;
        k.since_ms = now.wall.timestamp_millis();
        k.source = Source::Process;
        k.process = None;
        true
    }

    /// Forgets every name `keep` refuses (a name taken off the roster).
    fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.known.retain(|n, _| keep(n));
        self.waiting_since.retain(|n, _| keep(n));
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.next_check
    }

    /// The loop saw a process it was asked to check (`Output::CheckProcesses`) gone: its name
    /// becomes `gone`. Called for each exited one, then `checked`. Returns whether the name
    /// entered `gone` (its leases end, lease design §A.5).
    pub(super) fn process_exited(
        &mut self,
        name: &str,
        process: WatchedProcess,
        now: Now,
        out: &mut Outbox,
    ) -> bool {
        let exited = self.exited(name, process, now);
        if exited {
            out.log(format!(
                "liveness: name={name} pid={} exited; state gone",
                process.pid
            ));
        }
        exited
    }

    /// The loop finished the check `Output::CheckProcesses` asked for: the next one is due a
    /// `PROCESS_CHECK_INTERVAL` from now while any process is still watched.
    pub(super) fn checked(&mut self, now: Now) {
        self.checking = false;
        self.next_check = (!self.watched().is_empty())
            .then(|| crate::kernel::deadline::after(now.mono, PROCESS_CHECK_INTERVAL));
    }

    /// Called from `handle_timeout`: asks the loop to check the watched processes when due,
    /// first forgetting the names no longer on `roster`.
    pub(super) fn expire(&mut self, now: Now, roster: &Roster, out: &mut Outbox) {
        if !self.next_check.is_some_and(|t| t <= now.mono) {
            return;
        }
        self.retain(|n| roster.contains(n));
        let watched = self.watched();
        self.next_check = None;
        if watched.is_empty() {
            return;
        }
        self.checking = true;
        out.push(Output::CheckProcesses(watched));
    }

    /// An await of `name` is about to park: a run of waiting starts now if none was parked.
    /// Only roster names have a state (a task identity's awaits are not kept here).
    pub(super) fn note_parking(&mut self, name: &str, roster: &Roster, router: &Router, now: Now) {
        if roster.contains(name) && router.stats(name).parked == 0 {
            self.waiting_since
                .insert(name.to_owned(), now.wall.timestamp_millis());
        }
    }

    /// A roster name's state, when it entered it (unix ms) and its source (SPEC §14): a
    /// parked await (`parked`) first, then what its hooks and process said, else `unknown`.
    pub(super) fn state_of(
        &self,
        name: &str,
        parked: bool,
    ) -> (&'static str, Option<i64>, Option<&'static str>) {
        if parked {
            return (
                "waiting",
                self.waiting_since(name),
                Some(Source::Await.as_str()),
            );
        }
        match self.known(name) {
            Some(k) => (k.state.as_str(), Some(k.since_ms), Some(k.source.as_str())),
            None => (UNKNOWN_STATE, None, None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};

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

    fn roster() -> Roster {
        Roster::parse("[agents]\nbee = \"tok-bee\"\nant = \"tok-ant\"\n").expect("valid roster")
    }

    const PID: WatchedProcess = WatchedProcess {
        pid: 42,
        start: Some(7),
    };

    /// A watched process is checked an interval after it was reported, once at a time; its
    /// exit makes the name `gone`, with one service-log line.
    #[test]
    fn a_watched_process_is_checked_once_at_a_time_and_its_exit_is_logged() {
        let now = clock();
        let (mut l, mut out, roster) = (Liveness::default(), Outbox::default(), roster());
        l.report("bee", TurnState::Busy, Some(PID), now(0));
        assert_eq!(l.poll_timeout(), Some(now(1000).mono));
        l.expire(now(999), &roster, &mut out);
        assert_eq!(out.pop(), None, "not due yet");
        l.expire(now(1000), &roster, &mut out);
        assert_eq!(
            out.pop(),
            Some(Output::CheckProcesses(vec![("bee".into(), PID)]))
        );
        assert_eq!(l.poll_timeout(), None, "no second check while one is out");
        l.process_exited("bee", PID, now(1200), &mut out);
        assert_eq!(
            out.pop(),
            Some(Output::Log(
                "liveness: name=bee pid=42 exited; state gone".into()
            ))
        );
        l.checked(now(1300));
        assert_eq!(l.poll_timeout(), None, "nothing left to watch");
        assert_eq!(l.state_of("bee", false).0, "gone");
        // Another pid's exit, or a name never watched, changes nothing and logs nothing.
        l.process_exited("ant", PID, now(1400), &mut out);
        assert_eq!(out.pop(), None);
    }

    /// A parked await outranks what the hooks said; a name taken off the roster is forgotten
    /// at the next check.
    #[test]
    fn waiting_outranks_the_hooks_and_names_off_the_roster_are_forgotten() {
        let now = clock();
        let (mut l, mut out) = (Liveness::default(), Outbox::default());
        let mut router = Router::new(10, 1 << 20);
        l.report("bee", TurnState::Idle, Some(PID), now(0));
        l.note_parking("bee", &roster(), &router, now(5));
        l.note_parking("stranger", &roster(), &router, now(5));
        let t0 = now(0).wall.timestamp_millis();
        assert_eq!(
            l.state_of("bee", true),
            ("waiting", Some(t0 + 5), Some("await"))
        );
        assert_eq!(l.state_of("bee", false), ("idle", Some(t0), Some("hook")));
        assert_eq!(l.waiting_since("stranger"), None, "only roster names");
        // A second await while one is parked keeps the run's start.
        let filter = crate::hub::router::Filter {
            reply_to: None,
            kind: None,
        };
        router.park("bee", filter, 1);
        l.note_parking("bee", &roster(), &router, now(9));
        assert_eq!(l.waiting_since("bee"), Some(t0 + 5));
        let smaller = Roster::parse("[agents]\nant = \"tok-ant\"\n").expect("valid roster");
        l.expire(now(1000), &smaller, &mut out);
        assert_eq!(out.pop(), None, "nothing watched is left to check");
        assert!(l.known("bee").is_none() && l.waiting_since("bee").is_none());
        assert_eq!(l.state_of("bee", false), (UNKNOWN_STATE, None, None));
    }
}
