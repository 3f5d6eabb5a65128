//! Leases end to end (issue 39, lease design §A, SPEC §17) against the real server, with raw
//! verb lines: one agent holds `src/**` and another's waiting claim is granted at its release;
//! a conflict names the holder, its lease and expiry; a short lease warns its holder and is
//! lost with envelopes from `hub`; the holder's process exiting (liveness, as
//! `liveness.rs` drives it) releases its lease to the waiter. And the attacks: another
//! owner's release and renew refused, a claim flood past `leases.max_per_identity`, oversize
//! and hostile values refused with texts that quote nothing. Nothing sleeps: every wait is a
//! read with the harness's deadline.

use crate::harness::*;
use serde_json::{json, Value};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// `name` sends one lease line on a fresh connection; the reply.
fn verb(hub: &Hub, name: &str, line: Value) -> Value {
    let mut r = hub.login(name);
    r.write(&format!("{line}\n"));
    r.json()
}

fn claim(value: &str, extra: Value) -> Value {
    let mut payload = json!({"kind": "path_glob", "value": value});
    if let (Value::Object(p), Value::Object(e)) = (&mut payload, extra) {
        p.extend(e);
    }
    json!({ "lease_claim": payload })
}

/// A granted claim's lease id.
fn granted(hub: &Hub, name: &str, value: &str, extra: Value) -> String {
    let reply = verb(hub, name, claim(value, extra));
    assert_eq!(reply["lease_claim"]["outcome"], "granted", "{reply}");
    reply["lease_claim"]["lease"]["lease"]
        .as_str()
        .expect("a lease id")
        .to_owned()
}

fn error_of(reply: &Value) -> &str {
    reply["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("expected an error line, got {reply}"))
}

/// A waiting claim: hello and claim in one write, the ok line read; nothing else yet.
fn park_claim(hub: &Hub, name: &str, value: &str, extra: Value) -> Raw {
    let mut extra = extra;
    extra["wait"] = json!(true);
    hub.park(name, &claim(value, extra).to_string())
}

/// A `[leases]` table on top of the generated config.
fn hub_with_leases(table: &str) -> Hub {
    let mut setup = Setup::new();
    setup.config_text = Some(format!("{}\n[leases]\n{table}", setup.generated_config()));
    setup.start()
}

#[test]
fn a_waiting_claim_is_granted_at_the_holders_release_within_milliseconds() {
    let hub = Hub::start();
    let held = granted(&hub, "alpha", "src/**", json!({"reason": "refactor relay"}));
    let mut waiter = park_claim(&hub, "beta", "src/relay/peer.rs", json!({}));
    // The holder releases; the waiter's grant follows the release's commit.
    let mut r = hub.login("alpha");
    let released_at = Instant::now();
    r.write(&format!("{}\n", json!({"lease_release": {"lease": held}})));
    assert_eq!(
        r.json(),
        json!({"lease_release": {"lease": held, "outcome": "released"}})
    );
    let reply = waiter.json();
    let latency = released_at.elapsed();
    let c = &reply["lease_claim"];
    assert_eq!(c["outcome"], "granted", "{reply}");
    assert_eq!(c["lease"]["owner"], "beta");
    assert_eq!(c["lease"]["value"], "src/relay/peer.rs");
    assert_eq!(c["lease"]["state"], "active");
    assert!(c["waitedMs"].as_u64().is_some());
    assert!(
        latency < Duration::from_millis(500),
        "granted {latency:?} after the release"
    );
    let events: Vec<String> = hub
        .wait_audit("the waiter's grant", |a| {
            a.iter()
                .any(|e| e["event"] == "lease_granted" && e["via"] == "wait")
        })
        .iter()
        .filter_map(|e| {
            e["event"]
                .as_str()
                .filter(|x| x.starts_with("lease_"))
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(
        events,
        [
            "lease_granted",
            "lease_queued",
            "lease_released",
            "lease_granted"
        ]
    );
    // The reason is the claimer's text: never in the audit log.
    assert!(!std::fs::read_to_string(hub.audit_path())
        .unwrap()
        .contains("refactor relay"));
}

#[test]
fn a_conflict_names_the_holder_its_lease_and_expiry() {
    let hub = Hub::start();
    let held = granted(&hub, "alpha", "src/**", json!({"ttlSecs": 600}));
    let reply = verb(&hub, "beta", claim("src/relay/peer.rs", json!({})));
    let c = &reply["lease_claim"];
    assert_eq!(c["outcome"], "conflict", "{reply}");
    assert_eq!(c["holder"], "alpha");
    assert_eq!(c["holderLease"], held.as_str());
    assert!(c["expiresAt"].as_str().is_some_and(|t| t.ends_with('Z')));
    assert_eq!(c["ahead"], 0);
    // The list shows the lease to everyone, the holder's own claim is no conflict.
    let list = verb(&hub, "gamma", json!({"lease_list": {}}));
    assert_eq!(list["lease_list"]["leases"][0]["lease"], held.as_str());
    granted(&hub, "alpha", "src/relay/peer.rs", json!({}));
    // A waiting claim with a deadline gets the timeout outcome, nothing granted.
    let mut w = park_claim(&hub, "beta", "src/a.rs", json!({"timeoutSecs": 1}));
    let reply = w.json();
    assert_eq!(reply["lease_claim"]["outcome"], "timeout", "{reply}");
    assert_eq!(reply["lease_claim"]["holder"], "alpha");
}

#[test]
fn a_short_lease_warns_its_holder_then_is_lost_with_envelopes() {
    // Renewal off: alpha's parked awaits would make it live (`waiting`), and a live holder's
    // lease is renewed at its warn point instead (that case is the simulation's).
    let hub = hub_with_leases("auto_renew = \"never\"\n");
    // Warned at half its 2 s, lost at 2 s.
    let lease = granted(&hub, "alpha", "db-main", json!({"ttlSecs": 2}));
    let mut warn = hub.park("alpha", r#"{"await":{"kind":"lease_expiring"}}"#);
    let env = warn.envelope();
    assert_eq!(env["from"], "hub");
    assert_eq!(env["correlationId"], lease.as_str());
    assert_eq!(env["body"]["lease"], lease.as_str());
    assert_eq!(
        env["body"]["renew"],
        format!("agent-hub lease renew --lease {lease}")
    );
    let mut lost = hub.park("alpha", r#"{"await":{"kind":"lease_lost"}}"#);
    let env = lost.envelope();
    assert_eq!(env["body"]["why"], "expired");
    assert_eq!(env["body"]["value"], "db-main");
    hub.wait_audit("the expiry", |a| {
        a.iter()
            .any(|e| e["event"] == "lease_expired" && e["lease"] == lease.as_str())
    });
    // Gone: a release now is told so, and the resource is free.
    let reply = verb(&hub, "alpha", json!({"lease_release": {"lease": lease}}));
    assert_eq!(
        error_of(&reply),
        format!("invalid lease_release: {lease} is not active (expired)")
    );
    granted(&hub, "beta", "db-main", json!({}));
}

/// A process the test owns, reported as the holder's agent (as a hook would).
struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn the_holder_going_gone_releases_its_lease_to_the_waiter() {
    let hub = Hub::start();
    let mut agent = Agent(
        Command::new("sleep")
            .arg("600")
            .spawn()
            .expect("sleep runs"),
    );
    let busy = json!({"turn": {"state": "busy", "pid": agent.0.id()}});
    assert_eq!(verb(&hub, "alpha", busy)["turn"]["state"], "busy");
    let held = granted(&hub, "alpha", "src/**", json!({}));
    // Idle holds on.
    assert_eq!(
        verb(&hub, "alpha", json!({"turn": {"state": "idle"}}))["turn"]["state"],
        "idle"
    );
    let mut waiter = park_claim(&hub, "beta", "src/x.rs", json!({}));
    // The agent's process exits: the hub's own check makes alpha gone, and its lease goes.
    let _ = agent.0.kill();
    let _ = agent.0.wait();
    let reply = waiter.json();
    assert_eq!(reply["lease_claim"]["outcome"], "granted", "{reply}");
    hub.wait_audit("the release", |a| {
        a.iter().any(|e| {
            e["event"] == "lease_released"
                && e["lease"] == held.as_str()
                && e["why"] == "holder_gone"
        })
    });
}

#[test]
fn another_owners_release_renew_and_break_are_refused() {
    let hub = Hub::start();
    let held = granted(&hub, "alpha", "src/**", json!({}));
    let reply = verb(&hub, "beta", json!({"lease_release": {"lease": held}}));
    assert_eq!(
        error_of(&reply),
        format!("invalid lease_release: {held} is held by alpha, not beta")
    );
    let reply = verb(
        &hub,
        "beta",
        json!({"lease_renew": {"lease": held, "ttlSecs": 60}}),
    );
    assert_eq!(
        error_of(&reply),
        format!("invalid lease_renew: {held} is held by alpha, not beta")
    );
    let reply = verb(
        &hub,
        "beta",
        json!({"lease_break": {"lease": held, "reason": "mine now"}}),
    );
    assert_eq!(
        error_of(&reply),
        "invalid lease_break: only an operator may break a lease"
    );
    // A re-claim of alpha's id by beta is no way in either.
    let reply = verb(&hub, "beta", claim("src/**", json!({"lease": held})));
    assert_eq!(
        error_of(&reply),
        format!("invalid lease_claim: lease {held} is already in use")
    );
    // The lease is untouched: still alpha's, still blocking.
    let reply = verb(&hub, "beta", claim("src/a.rs", json!({})));
    assert_eq!(reply["lease_claim"]["holder"], "alpha");
}

#[test]
fn a_claim_flood_past_the_per_identity_cap_is_refused() {
    let hub = hub_with_leases("max_per_identity = 3\nmax_waiters_per_resource = 2\n");
    for i in 0..3 {
        granted(&hub, "alpha", &format!("f{i}"), json!({}));
    }
    let reply = verb(&hub, "alpha", claim("f3", json!({})));
    assert_eq!(
        error_of(&reply),
        "invalid lease_claim: alpha holds 3 leases and waits (leases.max_per_identity)"
    );
    // Waiting claims count against the waiters' cap per resource.
    let _w1 = park_claim(&hub, "beta", "f0", json!({}));
    let _w2 = park_claim(&hub, "gamma", "f0", json!({}));
    let reply = verb(&hub, "delta", claim("f0", json!({"wait": true})));
    assert_eq!(
        error_of(&reply),
        "invalid lease_claim: 2 claims already wait for path_glob:f0 (leases.max_waiters_per_resource)"
    );
    // Another identity is not held to alpha's count.
    granted(&hub, "delta", "g0", json!({}));
}

#[test]
fn oversize_and_hostile_values_are_refused_quoting_nothing() {
    let hub = Hub::start();
    let cases = [
        (
            claim(&"v".repeat(513), json!({})),
            "invalid lease_claim: value must be 1-512 printable characters".to_owned(),
        ),
        (
            claim(&"v".repeat(100_000), json!({})),
            "invalid lease_claim: value must be 1-512 printable characters".to_owned(),
        ),
        (
            claim("a\u{1b}]52;c;SECRET\u{7}", json!({})),
            "invalid lease_claim: value must be 1-512 printable characters".to_owned(),
        ),
        (
            json!({"lease_claim": {"kind": "Path_SECRET", "value": "x"}}),
            "invalid lease_claim: kind must be 1-32 characters of a-z, 0-9, _ or -".to_owned(),
        ),
        (
            claim("x", json!({"ttlSecs": 604_801})),
            "invalid lease_claim: ttlSecs must be between 1 and 604800".to_owned(),
        ),
        (
            claim("x", json!({"lease": "SECRET id"})),
            "invalid lease_claim: lease must be 1-96 printable characters without spaces or @"
                .to_owned(),
        ),
        (
            claim("x", json!({"tok-alpha-SECRET-1d9e": 1})),
            "malformed line: unknown field in `lease_claim`, expected one of `kind`, `value`, `mode`, `ttlSecs`, `reason`, `lease`, `root`, `wait`, `timeoutSecs`, `notify`, `fleet`".to_owned(),
        ),
        (
            json!({"lease_check": {"paths": vec!["p"; 300]}}),
            "invalid lease_check: at most 256 paths".to_owned(),
        ),
        (
            json!({"lease_check": {"paths": vec!["p"; 17]}}),
            "invalid lease_check: at most 16 paths".to_owned(),
        ),
    ];
    for (line, want) in cases {
        let reply = verb(&hub, "alpha", line);
        let got = error_of(&reply);
        assert_eq!(got, want);
        assert!(!got.contains("SECRET"), "{got}");
    }
    // Nothing was granted, and the service log holds no value of them.
    assert_eq!(
        verb(&hub, "beta", json!({"lease_list": {}}))["lease_list"]["leases"],
        json!([])
    );
    assert!(!hub.service_log().contains("SECRET"));
}
