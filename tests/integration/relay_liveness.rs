//! Liveness across two linked hubs (SPEC §14.1 "Remote names", docs/relay-protocol.md §5
//! "Liveness"): west's agent `omega` goes idle, waiting (a parked await), idle again and gone;
//! east's `who` (the CLI's JSON and its table) follows as `omega@west` with source `relay`,
//! while east's own names stay as they were. The beat interval is 5 s, so the changes travel
//! in the early beats feature `liveness` sends; every wait polls `who` with the harness's
//! deadline and never asserts a speed.

use crate::harness::*;
use crate::relay::{key_hex, names, west_setup, RelayHub, RelaySpec};
use agent_hub_proto::wire::{AgentPresence, Presence};

/// omega's token in `west_setup`'s roster.
const OMEGA_TOKEN: &str = "tok-omega-SECRET-4e1a";

fn who(h: &RelayHub) -> Presence {
    let out = h.hub.cli("who", "gamma", &["--json"]);
    out.assert_code(0);
    serde_json::from_str(out.stdout.trim()).expect("who --json is a presence object")
}

/// Polls east's `who` until `name` shows `state`; returns its entry.
fn wait_state(h: &RelayHub, name: &str, state: &str) -> AgentPresence {
    poll_until(&format!("{name} {state} in east's who"), || {
        who(h)
            .agents
            .into_iter()
            .find(|a| a.name == name && a.state == state)
    })
}

/// West's omega, logged in over a raw connection (west's roster is its own).
fn omega(west: &RelayHub) -> Raw {
    let mut r = west.hub.raw();
    r.write(&hello_line("omega", OMEGA_TOKEN));
    r.expect_line(OK);
    r
}

/// omega reports a turn state on west as its hooks would.
fn report(west: &RelayHub, state: &str) {
    let mut r = omega(west);
    r.write(&format!("{{\"turn\":{{\"state\":\"{state}\"}}}}\n"));
    let reply = r.line();
    assert!(reply.contains(state), "{reply}");
}

#[test]
fn a_remote_agent_going_waiting_idle_and_gone_shows_in_the_other_hubs_who() {
    let key = key_hex(0x5a);
    let mut west_spec = RelaySpec::new("west", "127.0.0.3:0")
        .peer("east", None, &key, false)
        .forwarding();
    west_spec.heartbeat_ms = 5_000;
    let west = RelayHub::start(west_setup(), west_spec);
    let mut east_spec = RelaySpec::new("east", "127.0.0.2:0")
        .peer("west", Some(west.relay_addr), &key, false)
        .forwarding();
    east_spec.heartbeat_ms = 5_000;
    let east = RelayHub::start(Setup::new(), east_spec);
    let e = east.wait_up("west");
    assert!(
        names(&e["features"]).contains(&"liveness".to_owned()),
        "{e}"
    );
    let before: Vec<(String, String)> = who(&east)
        .agents
        .into_iter()
        .filter(|a| !a.name.contains('@'))
        .map(|a| (a.name, a.state))
        .collect();

    report(&west, "idle");
    let a = wait_state(&east, "omega@west", "idle");
    assert_eq!(a.source.as_deref(), Some("relay"));
    assert!(a.since.is_some());

    let mut waiter = omega(&west);
    waiter.write(&format!("{}\n", await_line(None, None, None)));
    let a = wait_state(&east, "omega@west", "waiting");
    assert_eq!(a.source.as_deref(), Some("relay"));
    // The table shows the remote row with its state and source too.
    let out = east.hub.cli("who", "gamma", &[]);
    out.assert_code(0);
    let row = out
        .stdout
        .lines()
        .find(|l| l.contains("omega@west"))
        .unwrap_or_else(|| panic!("no omega@west row:\n{}", out.stdout));
    assert!(row.contains("waiting"), "{row}");

    drop(waiter);
    wait_state(&east, "omega@west", "idle");
    report(&west, "gone");
    wait_state(&east, "omega@west", "gone");
    // sigma said nothing: unknown, no source.
    let sigma = wait_state(&east, "sigma@west", "unknown");
    assert_eq!(sigma.source, None);

    // east's own names are untouched.
    let after: Vec<(String, String)> = who(&east)
        .agents
        .into_iter()
        .filter(|a| !a.name.contains('@'))
        .map(|a| (a.name, a.state))
        .collect();
    assert_eq!(before, after);
}
