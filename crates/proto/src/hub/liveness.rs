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

use super::event::Output;
/// Named here too: the loop's public path for it (`hub::liveness::WatchedProcess`); it sits
/// beside `Output`, which carries it.
pub use super::event::WatchedProcess;
use super::fold_hash::FoldMap;
use super::{ConnId, Hub, Now};
use crate::wire::{HubLine, TurnReply, TurnRequest, UNKNOWN_STATE};
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

    fn parse(s: &str) -> Option<TurnState> {
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
    fn report(&mut self, name: &str, state: TurnState, process: Option<WatchedProcess>, now: Now) {
        let now_ms = now.wall.timestamp_millis();
        let prev = self.known.get(name);
        if state == TurnState::Gone {
            if let (Some(p), Some(k)) = (process, prev) {
                if k.process.is_some_and(|w| w.pid != p.pid) && k.state != TurnState::Gone {
                    return;
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
}

impl Hub {
    /// `turn` (SPEC §14): records the caller's report and answers with its state as `who`
    /// now shows it. Only a roster name has a state; a task identity is refused.
    pub(in crate::hub) fn on_turn(&mut self, conn: ConnId, req: TurnRequest, now: Now) {
        let name = self.conns[&conn]
            .name
            .clone()
            .expect("verb phase is authenticated");
        if !self.settings.roster.contains(&name) {
            return self.fail(conn, "turn is for roster agents only", now);
        }
        let Some(state) = TurnState::parse(&req.state) else {
            // `ClientLine::decode` admits only the three states.
            return self.fail(conn, "invalid turn: state must be busy, idle or gone", now);
        };
        let process = req
            .pid
            .and_then(|p| u32::try_from(p).ok())
            .map(|pid| WatchedProcess {
                pid,
                start: req.start,
            });
        self.liveness.report(&name, state, process, now);
        let parked = self.router.stats(&name).parked > 0;
        let state = self.state_of(&name, parked).0;
        self.reply(
            conn,
            &HubLine::Turn(TurnReply {
                state: state.to_owned(),
            }),
            "turn",
            now,
        );
    }

    /// The loop saw a process it was asked to check (`Output::CheckProcesses`) gone: its name
    /// becomes `gone`. Called for each exited one, then `handle_processes_checked`.
    pub fn handle_process_exited(&mut self, name: &str, process: WatchedProcess, now: Now) {
        if self.liveness.exited(name, process, now) {
            self.outputs.log(format!(
                "liveness: name={name} pid={} exited; state gone",
                process.pid
            ));
        }
    }

    /// The loop finished the check `Output::CheckProcesses` asked for: the next one is due a
    /// `PROCESS_CHECK_INTERVAL` from now while any process is still watched.
    pub fn handle_processes_checked(&mut self, now: Now) {
        self.liveness.checking = false;
        self.liveness.next_check = (!self.liveness.watched().is_empty())
            .then(|| crate::kernel::deadline::after(now.mono, PROCESS_CHECK_INTERVAL));
    }

    /// Called from `handle_timeout`: asks the loop to check the watched processes when due.
    pub(in crate::hub) fn expire_liveness(&mut self, now: Now) {
        if !self.liveness.next_check.is_some_and(|t| t <= now.mono) {
            return;
        }
        let roster = &self.settings.roster;
        self.liveness.retain(|n| roster.contains(n));
        let watched = self.liveness.watched();
        self.liveness.next_check = None;
        if watched.is_empty() {
            return;
        }
        self.liveness.checking = true;
        self.outputs.push(Output::CheckProcesses(watched));
    }

    /// An await of `name` is about to park: a run of waiting starts now if none was parked.
    /// Only roster names have a state (a task identity's awaits are not kept here).
    pub(in crate::hub) fn note_parking(&mut self, name: &str, now: Now) {
        if self.settings.roster.contains(name) && self.router.stats(name).parked == 0 {
            self.liveness
                .waiting_since
                .insert(name.to_owned(), now.wall.timestamp_millis());
        }
    }

    /// A roster name's state, when it entered it (unix ms) and its source (SPEC §14): a
    /// parked await (`parked`) first, then what its hooks and process said, else `unknown`.
    pub(in crate::hub) fn state_of(
        &self,
        name: &str,
        parked: bool,
    ) -> (&'static str, Option<i64>, Option<&'static str>) {
        if parked {
            return (
                "waiting",
                self.liveness.waiting_since(name),
                Some(Source::Await.as_str()),
            );
        }
        match self.liveness.known(name) {
            Some(k) => (k.state.as_str(), Some(k.since_ms), Some(k.source.as_str())),
            None => (UNKNOWN_STATE, None, None),
        }
    }

    pub fn liveness(&self) -> &Liveness {
        &self.liveness
    }
}
