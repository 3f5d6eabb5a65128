//! Simulation tests of remote presence (SPEC §14.1 "Remote names", `hub::remote_presence`):
//! one hub's `local_directory` handed to another as the relay would after a heartbeat, shown
//! there as `name@peer` with `source` `relay`; what a hostile peer's directory can and cannot
//! do (never a local name's state, never another peer's names); and forgetting a peer whose
//! link went down.

use super::*;
use crate::relay::message::{AgentEntry, AgentState};

fn who(sim: &mut Sim, asker: &str) -> Vec<crate::wire::AgentPresence> {
    let c = sim.login(asker);
    sim.line(c, r#"{"who":{}}"#);
    let d = sim.drain();
    sim.io_flush();
    match d.lines(c).last() {
        Some(HubLine::Who(p)) => p.agents.clone(),
        other => panic!("expected a who line, got {other:?}"),
    }
}

fn row(agents: &[crate::wire::AgentPresence], name: &str) -> Option<(String, Option<String>)> {
    agents
        .iter()
        .find(|a| a.name == name)
        .map(|a| (a.state.clone(), a.source.clone()))
}

fn st(state: &str, source: Option<&str>) -> Option<(String, Option<String>)> {
    Some((state.to_owned(), source.map(str::to_owned)))
}

/// What the relay hands over after a beat: `from`'s own directory.
fn hand_over(from: &Sim, to: &mut Sim, peer: &str) {
    to.hub
        .handle_peer_directory(peer, from.hub.local_directory().into_iter().collect());
}

fn entry(state: AgentState) -> AgentEntry {
    AgentEntry {
        parked: 0,
        queued: 3,
        state,
        since_ms: Some(1_700_000_000_000),
    }
}

#[test]
fn a_peers_agents_show_as_name_at_peer_and_follow_its_states() {
    let mut west = Sim::new();
    let mut east = Sim::new();
    let c = west.login("mneme");
    west.line(c, r#"{"turn":{"state":"idle"}}"#);
    west.drain();
    hand_over(&west, &mut east, "west");
    let agents = who(&mut east, "scribe");
    assert_eq!(row(&agents, "mneme@west"), st("idle", Some("relay")));
    assert_eq!(row(&agents, "scribe@west"), st("unknown", None));
    // Local names first (the roster, sorted), then the remote ones, sorted.
    let names: Vec<&str> = agents.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "datastore",
            "mneme",
            "scribe",
            "datastore@west",
            "mneme@west",
            "scribe@west"
        ]
    );
    let m = agents.iter().find(|a| a.name == "mneme@west").unwrap();
    assert!(m.since.is_some() && m.parked.is_empty() && m.last_seen.is_none());

    // An await parks on west: east sees waiting; it ends: idle again; the session ends: gone.
    let waiter = west.park("mneme");
    west.drain();
    hand_over(&west, &mut east, "west");
    assert_eq!(
        row(&who(&mut east, "scribe"), "mneme@west"),
        st("waiting", Some("relay"))
    );
    west.eof(waiter);
    west.drain();
    hand_over(&west, &mut east, "west");
    assert_eq!(
        row(&who(&mut east, "scribe"), "mneme@west"),
        st("idle", Some("relay"))
    );
    let c = west.login("mneme");
    west.line(c, r#"{"turn":{"state":"gone"}}"#);
    west.drain();
    hand_over(&west, &mut east, "west");
    assert_eq!(
        row(&who(&mut east, "scribe"), "mneme@west"),
        st("gone", Some("relay"))
    );
    // activity lists exactly who's entries, the remote ones included.
    let c = east.login("scribe");
    east.line(c, r#"{"activity":{}}"#);
    let d = east.drain();
    match d.lines(c).last() {
        Some(HubLine::Activity(a)) => {
            assert!(a
                .agents
                .iter()
                .any(|x| x.name == "mneme@west" && x.state == "gone"))
        }
        other => panic!("expected an activity line, got {other:?}"),
    }
    // The local names are untouched throughout.
    assert_eq!(row(&who(&mut east, "scribe"), "mneme"), st("unknown", None));
}

#[test]
fn a_hostile_peer_states_only_its_own_names() {
    let mut hub = Sim::new();
    hub.hub.handle_peer_directory(
        "west",
        [("scribe".to_owned(), entry(AgentState::Idle))].into(),
    );
    // east claims local names and west's names, and tries names that pose as addresses.
    let claims: BTreeMap<String, AgentEntry> = [
        ("mneme", AgentState::Busy),
        ("datastore", AgentState::Gone),
        ("scribe@west", AgentState::Waiting),
        ("scribe@", AgentState::Waiting),
        ("a b", AgentState::Busy),
        ("bell\u{7}", AgentState::Busy),
        ("", AgentState::Busy),
    ]
    .into_iter()
    .map(|(n, s)| (n.to_owned(), entry(s)))
    .collect();
    hub.hub.handle_peer_directory("east", claims);
    let agents = who(&mut hub, "scribe");
    for local in ["mneme", "datastore", "scribe"] {
        assert_eq!(row(&agents, local), st("unknown", None), "{local}");
    }
    assert_eq!(row(&agents, "mneme@east"), st("busy", Some("relay")));
    assert_eq!(row(&agents, "datastore@east"), st("gone", Some("relay")));
    assert_eq!(row(&agents, "scribe@west"), st("idle", Some("relay")));
    let names: Vec<&str> = agents.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "datastore",
            "mneme",
            "scribe",
            "datastore@east",
            "mneme@east",
            "scribe@west"
        ],
        "no entry posing as another peer's, none with odd characters"
    );
    // What this hub tells its own peers holds only its roster names, never a peer's claims.
    let ours: Vec<String> = hub
        .hub
        .local_directory()
        .into_iter()
        .map(|(n, e)| {
            assert_eq!(e.state, AgentState::Unknown, "{n}");
            n
        })
        .collect();
    assert_eq!(ours, ["datastore", "mneme", "scribe"]);
}

#[test]
fn an_address_that_is_a_roster_name_stays_the_local_agent() {
    let mut hub = Sim::new();
    let roster = crate::roster::Roster::parse(
        "[agents]\nmneme = \"tok-mneme\"\nscribe = \"tok-scribe\"\n\"ops@east\" = \"tok-ops\"\n",
    )
    .unwrap();
    let now = hub.now();
    hub.hub.replace_roster(roster, now);
    hub.drain();
    hub.hub
        .handle_peer_directory("east", [("ops".to_owned(), entry(AgentState::Busy))].into());
    let agents = who(&mut hub, "scribe");
    let ops: Vec<_> = agents.iter().filter(|a| a.name == "ops@east").collect();
    assert_eq!(ops.len(), 1, "{agents:?}");
    assert_eq!(
        (ops[0].state.as_str(), ops[0].source.as_deref()),
        ("unknown", None),
        "the roster's ops@east, not east's ops"
    );
}

#[test]
fn a_peer_whose_link_went_down_is_forgotten() {
    let mut hub = Sim::new();
    hub.hub
        .handle_peer_directory("east", [("ops".to_owned(), entry(AgentState::Busy))].into());
    assert_eq!(
        row(&who(&mut hub, "scribe"), "ops@east"),
        st("busy", Some("relay"))
    );
    let now = hub.now();
    hub.hub.handle_peer_link(
        "east",
        false,
        crate::tasks::LinkTerms {
            agent_hub: true,
            approvals: false,
        },
        now,
    );
    hub.drain();
    assert_eq!(row(&who(&mut hub, "scribe"), "ops@east"), None);
}
