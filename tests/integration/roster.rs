//! `agent-hub-server roster add|remove|rotate` against a running hub, and the hub's roster
//! reload on SIGHUP (docs/operations.md, "Changing the roster"): nothing queued is lost,
//! a removed or rotated token is refused at once, what it had open is closed, an invalid
//! roster keeps the old one with the reason in the service log, no token in any log or
//! output; and the attacks: edits racing reloads, a SIGHUP flood, prefix and duplicate tokens.

use crate::harness::*;
use std::fs;
use std::process::Command;

const REMOVED: &str = "this agent was removed from the hub's roster; nothing was consumed";
const ROTATED: &str =
    "this agent's token was rotated; connect again with the new token; nothing was consumed";

/// `agent-hub-server roster <args…> --config <the hub's config>`.
fn roster(hub: &Hub, args: &[&str]) -> Output {
    let mut cmd = Command::new(SERVER);
    cmd.arg("roster")
        .args(args)
        .arg("--config")
        .arg(hub.setup.config_path())
        .current_dir(hub.setup.path("cwd"));
    run(cmd, None)
}

/// The token in `tokens/<name>.token`.
fn token_in(hub: &Hub, name: &str) -> String {
    fs::read_to_string(hub.token_file(name))
        .unwrap()
        .trim_end()
        .to_owned()
}

/// A hello with `token`; the hub's one reply line.
fn hello_reply(hub: &Hub, name: &str, token: &str) -> String {
    let mut r = hub.raw();
    r.write(&hello_line(name, token));
    r.line()
}

fn refused(line: &str) -> bool {
    line == error_line("authentication failed: unknown name or wrong token")
}

/// Asserts none of `tokens` is in any log or in `outputs`.
fn no_token_anywhere(hub: &Hub, tokens: &[String], outputs: &[&Output]) {
    let audit = fs::read_to_string(hub.audit_path()).unwrap_or_default();
    let service = hub.service_log();
    for t in tokens {
        assert!(!audit.contains(t.as_str()), "a token reached the audit log");
        assert!(
            !service.contains(t.as_str()),
            "a token reached the service log"
        );
        for o in outputs {
            assert!(
                !o.stdout.contains(t.as_str()) && !o.stderr.contains(t.as_str()),
                "a token was printed: {} {}",
                o.stdout,
                o.stderr
            );
        }
    }
}

fn reloads(log: &str, what: &str) -> usize {
    log.lines().filter(|l| l.contains(what)).count()
}

/// Sends SIGHUP and waits for the next service-log line about a reload; returns it.
fn hup(hub: &Hub) -> String {
    let before = hub.service_log();
    let n = reloads(&before, "roster reload");
    hub.signal(libc::SIGHUP);
    let log = hub.wait_service_log("a roster reload line", |s| reloads(s, "roster reload") > n);
    log.lines()
        .filter(|l| l.contains("roster reload"))
        .nth(n)
        .unwrap()
        .to_owned()
}

#[test]
fn add_remove_and_rotate_on_a_running_hub_lose_no_mail_and_revoke_at_once() {
    let hub = Hub::start();
    // Mail for a name not yet on the roster is queued (SPEC §3.2).
    let early = hub.cli_send("alpha", "epsilon", "task", r#"{"n":1}"#);
    let for_beta = hub.cli_send("alpha", "beta", "task", r#"{"n":2}"#);

    let add = roster(&hub, &["add", "epsilon"]);
    add.assert_code(0);
    assert!(
        add.stdout.contains(r#"added ["epsilon"]"#),
        "{}",
        add.stdout
    );
    // The client named as the shell finds it (by path, unless PATH has this very binary),
    // and the port left to fill in: this hub's config says 0.
    let next = |program: &str| format!("next: {program} await --as epsilon --token-file ");
    assert!(
        add.stdout.contains(&next("agent-hub")) || add.stdout.contains(&next(CLIENT)),
        "{}",
        add.stdout
    );
    assert!(add.stdout.contains(" --port PORT\n"), "{}", add.stdout);
    assert_eq!(mode_of(&hub.token_file("epsilon")), 0o600);
    let got = hub.cli("await", "epsilon", &["--timeout", "0"]);
    got.assert_code(0);
    assert!(got.stdout.contains(&early), "{}", got.stdout);
    let who = hub.cli("who", "alpha", &[]);
    assert!(who.stdout.contains("epsilon"), "{}", who.stdout);

    // Removal: the parked await ends with an error, the token is refused, mail stays.
    let mut parked = hub.park("beta", r#"{"await":{"kind":"other"}}"#);
    let old_beta = token_in(&hub, "beta");
    let rm = roster(&hub, &["remove", "beta"]);
    rm.assert_code(0);
    assert!(rm.stdout.contains(r#"removed ["beta"]"#), "{}", rm.stdout);
    assert!(rm.stdout.contains("closed 1 connections"), "{}", rm.stdout);
    assert_eq!(parked.error(), REMOVED);
    assert!(
        !hub.token_file("beta").exists(),
        "its token file went with it"
    );
    assert!(refused(&hello_reply(&hub, "beta", &old_beta)));
    let late = hub.cli_send("alpha", "beta", "task", r#"{"n":3}"#);
    // Put back with a new token: the same queue, in order.
    roster(&hub, &["add", "beta"]).assert_code(0);
    let new_beta = token_in(&hub, "beta");
    assert_ne!(new_beta, old_beta);
    let mut ids = Vec::new();
    for _ in 0..2 {
        let o = hub.cli("await", "beta", &["--timeout", "0"]);
        o.assert_code(0);
        let v: serde_json::Value = serde_json::from_str(o.stdout.trim()).unwrap();
        ids.push(v["id"].as_str().unwrap().to_owned());
    }
    assert_eq!(ids, [for_beta, late]);

    // Rotation: the old token is refused, the new one works, the old one's await is closed.
    let mut parked = hub.park("gamma", AWAIT);
    let rot = roster(&hub, &["rotate", "gamma"]);
    rot.assert_code(0);
    assert!(
        rot.stdout.contains(r#"rotated ["gamma"]"#),
        "{}",
        rot.stdout
    );
    assert_eq!(parked.error(), ROTATED);
    assert!(refused(&hello_reply(&hub, "gamma", token_of("gamma"))));
    let new_gamma = token_in(&hub, "gamma");
    assert_eq!(hello_reply(&hub, "gamma", &new_gamma), OK);
    hub.cli("await", "gamma", &["--timeout", "0"])
        .assert_code(2);

    let log = hub.service_log();
    assert_eq!(reloads(&log, "roster reloaded"), 4, "{log}");
    let tokens = [token_in(&hub, "epsilon"), old_beta, new_beta, new_gamma];
    no_token_anywhere(&hub, &tokens, &[&add, &rm, &rot]);
    let list = roster(&hub, &["list"]);
    list.assert_code(0);
    assert!(list.stdout.contains("epsilon\t"), "{}", list.stdout);
    no_token_anywhere(&hub, &tokens, &[&list]);
}

#[test]
fn an_invalid_roster_keeps_the_old_one_and_the_service_log_says_why() {
    let hub = Hub::start();
    let roster_path = hub.setup.path("roster.toml");
    let good = fs::read_to_string(&roster_path).unwrap();
    let cases: [(&str, u32, &str); 5] = [
        (
            "[agents]\nalpha = \"tok-alpha-SECRET-1d9e\"\nhub = \"tok-x-SECRET\"\n",
            0o600,
            "reserved",
        ),
        (
            "[agents]\nalpha = \"tok-a-SECRET\"\nzeta = \"tok-a-SECRET\"\n",
            0o600,
            "share one token",
        ),
        (
            "[agents]\nalpha = \"tok-alpha-SECRET-1d9e\n",
            0o600,
            "not valid TOML",
        ),
        ("[agents]\n", 0o600, "empty"),
        (&good, 0o644, "mode 644"),
    ];
    for (text, mode, why) in cases {
        hub.setup.write_roster(text, mode);
        let line = hup(&hub);
        assert!(
            line.contains("ERROR roster reload refused, keeping the roster in force (4 agents)"),
            "{line}"
        );
        assert!(line.contains(why), "{why}: {line}");
        assert_eq!(
            hello_reply(&hub, "alpha", token_of("alpha")),
            OK,
            "the old roster stands"
        );
        assert!(refused(&hello_reply(&hub, "zeta", "tok-a-SECRET")));
    }
    // Unreadable: gone altogether.
    fs::remove_file(&roster_path).unwrap();
    let line = hup(&hub);
    assert!(
        line.contains("roster reload refused") && line.contains("cannot read"),
        "{line}"
    );
    assert_eq!(hello_reply(&hub, "delta", token_of("delta")), OK);
    // A roster command refuses a file it cannot parse, and leaves it as it was.
    hub.setup.write_roster("[agents\nalpha = 1\n", 0o600);
    let o = roster(&hub, &["add", "zeta"]);
    o.assert_code(1);
    assert!(o.stderr.contains("cannot be read"), "{}", o.stderr);
    assert_eq!(
        fs::read_to_string(&roster_path).unwrap(),
        "[agents\nalpha = 1\n"
    );
    assert!(!hub.token_file("zeta").exists());
}

#[test]
fn roster_add_refuses_existing_reserved_and_unsafe_names_and_writes_nothing() {
    let hub = Hub::start();
    let before = fs::read_to_string(hub.setup.path("roster.toml")).unwrap();
    for (name, why) in [
        ("alpha", "already on the roster"),
        ("hub", "reserved"),
        ("Hub", "reserved"),
        ("task-7", "reserved"),
        ("../escape", "must be"),
        ("a/b", "must be"),
        (".hidden", "must be"),
    ] {
        let o = roster(&hub, &["add", name]);
        o.assert_code(1);
        assert!(o.stderr.contains(why), "{name}: {}", o.stderr);
    }
    assert_eq!(
        fs::read_to_string(hub.setup.path("roster.toml")).unwrap(),
        before
    );
    let names: Vec<String> = fs::read_dir(hub.setup.path("tokens"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".token"))
        .collect();
    assert_eq!(names.len(), 4, "{names:?}");
    assert!(!hub.setup.path("escape.token").exists());
    roster(&hub, &["remove", "ghost"]).assert_code(1);
    roster(&hub, &["rotate", "ghost"]).assert_code(1);
    assert!(
        !hub.service_log().contains("roster reload"),
        "nothing was reloaded"
    );
}

/// A user's comments and layout survive the edits; `--no-reload` leaves the hub alone and
/// says how to reload it.
#[test]
fn edits_keep_the_operators_roster_text_and_no_reload_says_how() {
    let setup = Setup::new();
    let text = "# team roster\n[agents]\n# the old hands\nalpha = \"tok-alpha-SECRET-1d9e\"   # since May\nbeta = \"tok-beta-SECRET-7a21\"\ngamma = \"tok-gamma-SECRET-c3f0\"\ndelta = \"tok-delta-SECRET-5b88\"\n\n# end of file\n";
    setup.write_roster(text, 0o600);
    let hub = setup.start();
    let o = roster(&hub, &["add", "zeta", "--no-reload"]);
    o.assert_code(0);
    assert!(
        o.stdout.contains(&format!("kill -HUP {}", hub.pid())),
        "{}",
        o.stdout
    );
    assert!(!hub.service_log().contains("roster reload"));
    let now = fs::read_to_string(hub.setup.path("roster.toml")).unwrap();
    let zeta = token_in(&hub, "zeta");
    assert_eq!(
        now,
        text.replace(
            "delta = \"tok-delta-SECRET-5b88\"\n",
            &format!("delta = \"tok-delta-SECRET-5b88\"\nzeta = \"{zeta}\"\n")
        )
    );
    roster(&hub, &["rotate", "alpha", "--no-reload"]).assert_code(0);
    let now = fs::read_to_string(hub.setup.path("roster.toml")).unwrap();
    let alpha = token_in(&hub, "alpha");
    assert!(
        now.contains(&format!("alpha = \"{alpha}\"   # since May\n")),
        "{now}"
    );
    roster(&hub, &["remove", "beta", "--no-reload"]).assert_code(0);
    let now = fs::read_to_string(hub.setup.path("roster.toml")).unwrap();
    assert!(
        now.starts_with("# team roster\n[agents]\n# the old hands\n"),
        "{now}"
    );
    assert!(now.ends_with("\n\n# end of file\n"), "{now}");
    assert!(!now.contains("beta"));
    assert_eq!(mode_of(&hub.setup.path("roster.toml")), 0o600);
    // A roster command for a config no hub runs from says so.
    let other = TempDir::new();
    let cfg = other.path.join("config.toml");
    fs::write(
        &cfg,
        fs::read_to_string(hub.setup.config_path())
            .unwrap()
            .replace(
                "roster.toml",
                &hub.setup.path("roster.toml").display().to_string(),
            ),
    )
    .unwrap();
    let mut cmd = Command::new(SERVER);
    cmd.args(["roster", "add", "eta", "--config"]).arg(&cfg);
    let o = run(cmd, None);
    o.assert_code(0);
    assert!(o.stdout.contains("no running hub found"), "{}", o.stdout);
}

/// Attack: roster edits while SIGHUPs keep coming. Each edit replaces the file by rename,
/// so no reload ever sees a part of one: not one reload is refused, and the last one holds
/// every agent added.
#[test]
fn roster_edits_racing_a_stream_of_reloads_never_show_a_half_written_file() {
    let hub = Hub::start();
    let pid = hub.pid() as libc::pid_t;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut sent = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && sent < 20_000 {
                // SAFETY: kill(2) on the test's own running child.
                assert_eq!(unsafe { libc::kill(pid, libc::SIGHUP) }, 0);
                sent += 1;
                std::thread::yield_now();
            }
            sent
        })
    };
    let names: Vec<String> = (0..8).map(|i| format!("racer{i}")).collect();
    for n in &names {
        roster(&hub, &["add", n, "--no-reload"]).assert_code(0);
    }
    for n in &names[..4] {
        roster(&hub, &["rotate", n, "--no-reload"]).assert_code(0);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(flood.join().unwrap() > 0);
    let last = hup(&hub);
    assert!(last.contains("roster reloaded: 12 agents"), "{last}");
    let log = hub.service_log();
    assert_eq!(
        reloads(&log, "refused"),
        0,
        "a reload saw a torn roster:\n{log}"
    );
    for n in &names {
        let t = token_in(&hub, n);
        assert_eq!(hello_reply(&hub, n, &t), OK, "{n}");
    }
    let tokens: Vec<String> = names.iter().map(|n| token_in(&hub, n)).collect();
    no_token_anywhere(&hub, &tokens, &[]);
}

/// Attack: a flood of SIGHUPs neither stops the hub nor hides a SIGTERM behind it.
#[test]
fn a_sighup_flood_neither_stops_the_hub_nor_hides_a_sigterm() {
    let mut hub = Hub::start();
    for _ in 0..2_000 {
        hub.signal(libc::SIGHUP);
    }
    hub.wait_service_log("a reload", |s| s.contains("roster reloaded"));
    let id = hub.cli_send("alpha", "beta", "task", "{}");
    assert_eq!(hub.drain("beta"), [id]);
    for _ in 0..2_000 {
        hub.signal(libc::SIGHUP);
    }
    hub.signal(libc::SIGTERM);
    for _ in 0..2_000 {
        // The hub may be gone already; a failed kill is fine here.
        // SAFETY: kill(2) on the test's own child, which is not reaped yet.
        unsafe { libc::kill(hub.pid() as libc::pid_t, libc::SIGHUP) };
    }
    let status = hub.wait_exit();
    assert!(status.success(), "{status:?}");
    assert!(hub.service_log().contains("hub stopped"));
}

/// Attack: a token that is a prefix of another agent's, or the other agent's with a suffix,
/// authenticates nobody but its own agent after a reload; a duplicate is refused whole.
#[test]
fn prefix_tokens_after_a_reload_authenticate_only_their_own_agent() {
    let hub = Hub::start();
    hub.setup.write_roster(
        "[agents]\nalpha = \"tok-alpha-SECRET-1d9e\"\nshort = \"tok-alpha-SECRET\"\nlong = \"tok-alpha-SECRET-1d9e0\"\n",
        0o600,
    );
    let line = hup(&hub);
    assert!(line.contains(r#"added ["long", "short"]"#), "{line}");
    for (name, own) in [
        ("alpha", "tok-alpha-SECRET-1d9e"),
        ("short", "tok-alpha-SECRET"),
        ("long", "tok-alpha-SECRET-1d9e0"),
    ] {
        assert_eq!(hello_reply(&hub, name, own), OK, "{name}");
        for other in [
            "tok-alpha-SECRET-1d9e",
            "tok-alpha-SECRET",
            "tok-alpha-SECRET-1d9e0",
        ] {
            if other != own {
                assert!(
                    refused(&hello_reply(&hub, name, other)),
                    "{name} with {other}"
                );
            }
        }
    }
}
