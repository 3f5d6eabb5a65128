//! Simulation tests of liveness (SPEC §14, `hub::liveness`): each state and transition of a
//! roster name, the precedence of a parked await, a watched process's exit, what a report
//! can and cannot do to another name, and a name taken off the roster.

use super::*;
use crate::hub::liveness::PROCESS_CHECK_INTERVAL;
use crate::hub::WatchedProcess;
use crate::wire::AgentPresence;

fn who(sim: &mut Sim, asker: &str) -> crate::wire::Presence {
    let c = sim.login(asker);
    sim.line(c, r#"{"who":{}}"#);
    let d = sim.drain();
    sim.io_flush();
    match d.lines(c).last() {
        Some(HubLine::Who(p)) => p.clone(),
        other => panic!("expected a who line, got {other:?}"),
    }
}

fn entry(sim: &mut Sim, name: &str) -> AgentPresence {
    who(sim, "scribe")
        .agents
        .into_iter()
        .find(|a| a.name == name)
        .unwrap_or_else(|| panic!("{name} is not listed"))
}

fn state(sim: &mut Sim, name: &str) -> (String, Option<String>) {
    let a = entry(sim, name);
    (a.state, a.source)
}

/// `name` sends a turn line; returns the hub's final line on that connection.
fn turn(sim: &mut Sim, name: &str, line: &str) -> HubLine {
    let c = sim.login(name);
    sim.line(c, line);
    let d = sim.drain();
    sim.io_flush();
    d.lines(c).last().cloned().expect("a reply")
}

fn turn_ok(sim: &mut Sim, name: &str, line: &str) -> String {
    match turn(sim, name, line) {
        HubLine::Turn(t) => t.state,
        other => panic!("{line}: expected a turn reply, got {other:?}"),
    }
}

fn s(state: &str, source: Option<&str>) -> (String, Option<String>) {
    (state.to_owned(), source.map(str::to_owned))
}

/// Runs the process check the hub asks for, with `exited` the pids the loop found gone.
fn run_check(sim: &mut Sim, exited: &[u32]) -> Vec<(String, WatchedProcess)> {
    sim.advance(PROCESS_CHECK_INTERVAL.as_millis() as u64);
    let d = sim.drain();
    let asked: Vec<(String, WatchedProcess)> = d.process_checks.into_iter().flatten().collect();
    let now = sim.now();
    for (name, p) in &asked {
        if exited.contains(&p.pid) {
            sim.hub.handle_process_exited(name, *p, now);
        }
    }
    sim.hub.handle_processes_checked(now);
    sim.collect();
    asked
}

#[test]
fn every_name_is_unknown_until_something_is_known() {
    let mut sim = Sim::new();
    for a in who(&mut sim, "mneme").agents {
        assert_eq!(
            (a.state.as_str(), &a.since, &a.source),
            ("unknown", &None, &None)
        );
    }
    // Authenticating and sending say nothing about the agent's process.
    sim.sent("mneme", "datastore", "task", None);
    assert_eq!(state(&mut sim, "mneme"), s("unknown", None));
    // No process is watched, so the hub asks for no check.
    sim.advance(10_000);
    assert!(sim.drain().process_checks.is_empty());
}

#[test]
fn turn_start_end_and_session_end_move_the_state_with_since() {
    let mut sim = Sim::new();
    let reply = turn_ok(
        &mut sim,
        "mneme",
        r#"{"turn":{"state":"busy","pid":4242,"start":99}}"#,
    );
    assert_eq!(reply, "busy");
    let a = entry(&mut sim, "mneme");
    assert_eq!(
        (a.state.as_str(), a.source.as_deref()),
        ("busy", Some("hook"))
    );
    let since_busy = a.since.clone().expect("since is known");
    assert_eq!(since_busy, "2026-07-21T06:40:51.000Z");
    // A repeated busy keeps its since; idle starts a new one.
    sim.advance(500);
    turn_ok(
        &mut sim,
        "mneme",
        r#"{"turn":{"state":"busy","pid":4242,"start":99}}"#,
    );
    assert_eq!(entry(&mut sim, "mneme").since, Some(since_busy.clone()));
    sim.advance(500);
    assert_eq!(
        turn_ok(
            &mut sim,
            "mneme",
            r#"{"turn":{"state":"idle","pid":4242,"start":99}}"#
        ),
        "idle"
    );
    let a = entry(&mut sim, "mneme");
    assert_eq!(a.state, "idle");
    assert_eq!(a.since.as_deref(), Some("2026-07-21T06:40:52.000Z"));
    assert_eq!(
        turn_ok(&mut sim, "mneme", r#"{"turn":{"state":"gone","pid":4242}}"#),
        "gone"
    );
    assert_eq!(state(&mut sim, "mneme"), s("gone", Some("hook")));
    // A gone process is not watched any more.
    assert!(run_check(&mut sim, &[]).is_empty());
    // Others are untouched.
    assert_eq!(state(&mut sim, "datastore"), s("unknown", None));
}

#[test]
fn a_parked_await_shows_waiting_over_any_turn_state() {
    let mut sim = Sim::new();
    turn_ok(
        &mut sim,
        "datastore",
        r#"{"turn":{"state":"busy","pid":777}}"#,
    );
    sim.advance(1_500);
    let _ = run_check(&mut sim, &[]);
    let c = sim.park("datastore");
    sim.collect();
    let a = entry(&mut sim, "datastore");
    assert_eq!(
        (a.state.as_str(), a.source.as_deref()),
        ("waiting", Some("await"))
    );
    assert_eq!(a.since.as_deref(), Some("2026-07-21T06:40:53.500Z"));
    // The turn reply says what `who` shows: still waiting.
    assert_eq!(
        turn_ok(
            &mut sim,
            "datastore",
            r#"{"turn":{"state":"idle","pid":777}}"#
        ),
        "waiting"
    );
    // A second await keeps the run's since; the await's end uncovers the turn state.
    sim.advance(1_000);
    let c2 = sim.park("datastore");
    sim.collect();
    assert_eq!(
        entry(&mut sim, "datastore").since.as_deref(),
        Some("2026-07-21T06:40:53.500Z")
    );
    sim.eof(c);
    sim.eof(c2);
    sim.io_flush();
    sim.collect();
    assert_eq!(state(&mut sim, "datastore"), s("idle", Some("hook")));
    // Waiting with nothing else known, then the await times out: unknown again.
    let mut sim = Sim::new();
    let _c = sim.await_("scribe", None, None, Some(1));
    sim.collect();
    assert_eq!(state(&mut sim, "scribe"), s("waiting", Some("await")));
    sim.advance(1_000);
    sim.io_flush();
    assert_eq!(state(&mut sim, "scribe"), s("unknown", None));
}

#[test]
fn a_watched_process_that_exits_makes_its_name_gone_within_one_check() {
    let mut sim = Sim::new();
    turn_ok(
        &mut sim,
        "mneme",
        r#"{"turn":{"state":"busy","pid":4242,"start":99}}"#,
    );
    turn_ok(
        &mut sim,
        "scribe",
        r#"{"turn":{"state":"idle","pid":5151}}"#,
    );
    // The first check is asked one interval after the first watched report, not before.
    sim.advance(PROCESS_CHECK_INTERVAL.as_millis() as u64 - 1);
    assert!(sim.drain().process_checks.is_empty());
    let asked = run_check(&mut sim, &[]);
    assert_eq!(
        asked,
        vec![
            (
                "mneme".to_owned(),
                WatchedProcess {
                    pid: 4242,
                    start: Some(99)
                }
            ),
            (
                "scribe".to_owned(),
                WatchedProcess {
                    pid: 5151,
                    start: None
                }
            ),
        ]
    );
    assert_eq!(state(&mut sim, "mneme"), s("busy", Some("hook")));
    // Checks repeat every interval while something is watched; mneme's process exits.
    let now = sim.now();
    sim.hub.handle_process_exited(
        "mneme",
        WatchedProcess {
            pid: 4242,
            start: Some(98),
        },
        now,
    );
    assert_eq!(
        state(&mut sim, "mneme"),
        s("busy", Some("hook")),
        "not the process reported: its start time differs"
    );
    let asked = run_check(&mut sim, &[4242]);
    assert_eq!(asked.len(), 2);
    assert!(sim
        .drain()
        .logs
        .iter()
        .any(|l| l.contains("liveness: name=mneme pid=4242 exited")));
    let a = entry(&mut sim, "mneme");
    assert_eq!(
        (a.state.as_str(), a.source.as_deref()),
        ("gone", Some("process"))
    );
    assert_eq!(a.since.as_deref(), Some("2026-07-21T06:40:53.999Z"));
    // Only scribe's process is left to watch; then it exits too and checks stop.
    assert_eq!(run_check(&mut sim, &[5151]).len(), 1);
    assert_eq!(state(&mut sim, "scribe"), s("gone", Some("process")));
    assert!(run_check(&mut sim, &[]).is_empty());
    assert_eq!(sim.hub.liveness().poll_timeout(), None, "no check is due");
    // A new session of the same name is busy again, with its own process watched.
    turn_ok(
        &mut sim,
        "mneme",
        r#"{"turn":{"state":"busy","pid":4243,"start":7}}"#,
    );
    assert_eq!(state(&mut sim, "mneme"), s("busy", Some("hook")));
    assert_eq!(run_check(&mut sim, &[]).len(), 1);
}

#[test]
fn a_report_without_a_pid_watches_nothing_and_an_exit_of_an_old_process_changes_nothing() {
    let mut sim = Sim::new();
    turn_ok(&mut sim, "mneme", r#"{"turn":{"state":"busy"}}"#);
    assert_eq!(state(&mut sim, "mneme"), s("busy", Some("hook")));
    assert!(
        run_check(&mut sim, &[]).is_empty(),
        "no pid, nothing watched"
    );
    // The newest session's process is the one watched: the old one's exit and the old
    // one's session-end say nothing about it.
    turn_ok(
        &mut sim,
        "mneme",
        r#"{"turn":{"state":"idle","pid":100,"start":1}}"#,
    );
    turn_ok(
        &mut sim,
        "mneme",
        r#"{"turn":{"state":"busy","pid":200,"start":2}}"#,
    );
    let now = sim.now();
    sim.hub.handle_process_exited(
        "mneme",
        WatchedProcess {
            pid: 100,
            start: Some(1),
        },
        now,
    );
    assert_eq!(state(&mut sim, "mneme"), s("busy", Some("hook")));
    turn_ok(&mut sim, "mneme", r#"{"turn":{"state":"gone","pid":100}}"#);
    assert_eq!(state(&mut sim, "mneme"), s("busy", Some("hook")));
    // The same pid with another start time is another process: not the watched one.
    sim.hub.handle_process_exited(
        "mneme",
        WatchedProcess {
            pid: 200,
            start: Some(3),
        },
        now,
    );
    assert_eq!(state(&mut sim, "mneme"), s("busy", Some("hook")));
    // A later report without a pid keeps the watched process.
    turn_ok(&mut sim, "mneme", r#"{"turn":{"state":"idle"}}"#);
    let asked = run_check(&mut sim, &[200]);
    assert_eq!(asked.iter().map(|(_, p)| p.pid).collect::<Vec<_>>(), [200]);
    assert_eq!(state(&mut sim, "mneme"), s("gone", Some("process")));
}

/// Attack: a report only ever speaks for the authenticated name. A pid that belongs to
/// another agent (or pid 1, or nonsense) cannot make that agent look alive or gone.
#[test]
fn a_report_cannot_touch_another_name_and_bad_pids_are_refused() {
    let mut sim = Sim::new();
    turn_ok(
        &mut sim,
        "datastore",
        r#"{"turn":{"state":"busy","pid":300}}"#,
    );
    // mneme claims datastore's process, then says it is gone: only mneme changes.
    turn_ok(&mut sim, "mneme", r#"{"turn":{"state":"idle","pid":300}}"#);
    turn_ok(&mut sim, "mneme", r#"{"turn":{"state":"gone","pid":300}}"#);
    assert_eq!(state(&mut sim, "datastore"), s("busy", Some("hook")));
    assert_eq!(state(&mut sim, "mneme"), s("gone", Some("hook")));
    // There is no field to name another agent: the decoder refuses one.
    let HubLine::Error { message } = turn(
        &mut sim,
        "mneme",
        r#"{"turn":{"state":"gone","name":"datastore"}}"#,
    ) else {
        panic!("a name field must be refused")
    };
    assert!(message.contains("unknown field in `turn`"), "{message}");
    assert_eq!(state(&mut sim, "datastore"), s("busy", Some("hook")));
    // A wrong token never reaches the verb.
    let c = sim.open();
    sim.line(c, &hello_text("datastore", "tok-mneme"));
    sim.line(c, r#"{"turn":{"state":"gone"}}"#);
    let d = sim.drain();
    assert!(
        d.error(c).starts_with("authentication failed"),
        "{:?}",
        d.lines(c)
    );
    sim.io_flush();
    assert_eq!(state(&mut sim, "datastore"), s("busy", Some("hook")));
    // Pids that name no agent, and states outside the three, are refused, changing nothing.
    for (line, why) in [
        (
            r#"{"turn":{"state":"busy","pid":1}}"#,
            "pid must be a process id above 1",
        ),
        (
            r#"{"turn":{"state":"busy","pid":0}}"#,
            "pid must be a process id above 1",
        ),
        (
            r#"{"turn":{"state":"busy","pid":4294967296}}"#,
            "pid must be a process id above 1",
        ),
        (r#"{"turn":{"state":"busy","pid":-5}}"#, "negative integer"),
        (
            r#"{"turn":{"state":"busy","pid":"300"}}"#,
            "invalid type: string",
        ),
        (
            r#"{"turn":{"state":"waiting"}}"#,
            "state must be busy, idle or gone",
        ),
        (
            r#"{"turn":{"state":"unknown"}}"#,
            "state must be busy, idle or gone",
        ),
        (r#"{"turn":{"state":"busy","start":5}}"#, "start needs pid"),
        (r#"{"turn":{}}"#, "missing field `state`"),
    ] {
        let HubLine::Error { message } = turn(&mut sim, "scribe", line) else {
            panic!("{line} must be refused")
        };
        assert!(message.contains(why), "{line}: {message}");
    }
    assert_eq!(state(&mut sim, "scribe"), s("unknown", None));
}

#[test]
fn a_name_taken_off_the_roster_is_forgotten_and_no_longer_watched() {
    let mut sim = Sim::new();
    turn_ok(&mut sim, "mneme", r#"{"turn":{"state":"busy","pid":4242}}"#);
    turn_ok(
        &mut sim,
        "scribe",
        r#"{"turn":{"state":"busy","pid":5151}}"#,
    );
    sim.hub.settings.roster = Roster::parse(
        r#"
[agents]
datastore = "tok-datastore"
scribe = "tok-scribe"
"#,
    )
    .unwrap();
    let asked = run_check(&mut sim, &[]);
    assert_eq!(
        asked.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
        ["scribe"],
        "mneme is no longer watched"
    );
    let names: Vec<String> = who(&mut sim, "scribe")
        .agents
        .into_iter()
        .map(|a| a.name)
        .collect();
    assert_eq!(names, ["datastore", "scribe"]);
    assert!(sim.hub.liveness().known("mneme").is_none(), "forgotten");
    // Put back on the roster, it starts from unknown.
    sim.hub.settings.roster = Roster::parse(ROSTER).unwrap();
    assert_eq!(state(&mut sim, "mneme"), s("unknown", None));
}

#[test]
fn a_task_identity_cannot_report_a_turn() {
    // Task identities are not roster names (docs/delegation.md "Task identity"): they have
    // no `who` entry, so their reports are refused rather than kept.
    let mut sim = super::tasks::tasks_sim();
    let (task, token) = super::tasks::running_task_with_token(&mut sim);
    let c = sim.open();
    sim.line(c, &hello_text(&task, &token));
    sim.line(c, r#"{"turn":{"state":"busy","pid":4242}}"#);
    let d = sim.drain();
    assert_eq!(d.lines(c).first(), Some(&HubLine::Ok));
    assert_eq!(d.error(c), "turn is for roster agents only");
    assert!(sim.hub.liveness().watched().is_empty());
}
