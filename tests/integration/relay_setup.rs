//! Linking hubs from nothing, as docs/relay-setup.md walks it (issue 35, point 3): `relay
//! keygen`'s blocks pasted verbatim into two configs that real hubs then load, link with and
//! carry mail over both ways; the key's folder and file modes; what keygen refuses (and that a
//! refusal writes nothing); a claudectl peer's block linking with a v0 acceptor that holds the
//! key as claudectl keeps it; and the one setup mistake a link that is up does not show, named
//! in the service log.
//!
//! Owns: what a newcomer pastes and runs. Refuses: the relay's own behaviour (relay.rs and the
//! sans-IO tests own it). Every wait polls the status file or the service log, bounded by
//! `DEADLINE`; a hub's relay port is taken free on a loopback address just before keygen names
//! it (as relay.rs does for a peer's address).

use crate::harness::*;
use crate::relay::{free_port_on, is_hex64, v0_accept_and_challenge};
use serde_json::{json, Value};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

/// `agent-hub-server ARGS` run from `cwd`.
fn server_in(cwd: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(SERVER);
    cmd.args(args).current_dir(cwd);
    run(cmd, None)
}

/// The lines from `# >>> id` to `# <<< id`, both included: what the person pastes (and what
/// docs/relay-setup.md cuts out with sed).
fn block(stdout: &str, id: &str) -> String {
    let start = stdout
        .find(&format!("# >>> {id}\n"))
        .unwrap_or_else(|| panic!("no block for {id}:\n{stdout}"));
    let end_marker = format!("# <<< {id}\n");
    let end = stdout[start..]
        .find(&end_marker)
        .unwrap_or_else(|| panic!("the block for {id} never ends:\n{stdout}"))
        + start
        + end_marker.len();
    stdout[start..end].to_owned()
}

/// The `key_file` of the block's one `[[relay.peers]]` table.
fn key_file_of(block: &str) -> String {
    let v: toml::Value = toml::from_str(block).unwrap_or_else(|e| panic!("{e}:\n{block}"));
    v["relay"]["peers"][0]["key_file"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A hub's setup whose config file exists before keygen reads it (the harness writes it again,
/// with the pasted block, when the hub starts).
fn hub_folder() -> Setup {
    let s = Setup::new();
    write_file(&s.config_path(), &s.generated_config(), 0o600);
    s
}

/// Pastes `block` at the end of the setup's config.
fn paste(setup: &mut Setup, block: &str) {
    setup.config_text = Some(format!("{}\n{block}", setup.generated_config()));
}

/// Step 2 done as the text says: the key file copied to `key_file` (relative to the other
/// hub's folder), the folder made mode 700, the file mode 600.
fn copy_key(from: &Path, to_setup: &Setup, key_file: &str) {
    let to = to_setup.path(key_file);
    let dir = to.parent().unwrap();
    std::fs::create_dir_all(dir).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let text = std::fs::read_to_string(from).unwrap();
    write_file(&to, &text, 0o600);
}

/// The peer's row of the hub's status file (the snippet's `status_path`), once `pred` holds.
fn wait_row(hub: &Hub, peer: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let path = hub.setup.path("relay-status.json");
    poll_until(&format!("{peer} {what}"), || {
        let text = std::fs::read_to_string(&path).ok()?;
        let status: Value = serde_json::from_str(&text).ok()?;
        status["peers"]
            .as_array()?
            .iter()
            .find(|p| p["id"] == peer)
            .filter(|p| pred(p))
            .cloned()
    })
}

fn has_feature(row: &Value, name: &str) -> bool {
    row["features"]
        .as_array()
        .is_some_and(|f| f.iter().any(|x| x == name))
}

/// `agent-hub await` on `hub` as `name`: the envelope it printed.
fn await_one(hub: &Hub, name: &str) -> Value {
    let out = hub.cli("await", name, &["--timeout", "10"]);
    out.assert_code(0);
    serde_json::from_str(out.stdout.trim_end()).unwrap_or_else(|e| panic!("{e}: {}", out.stdout))
}

/// keygen for laptop (from its `cwd/`, a folder other than the config's) with mini at
/// `mini_addr`; returns its stdout.
fn keygen_laptop(laptop: &Setup, laptop_addr: &str, mini_addr: &str) -> Output {
    server_in(
        &laptop.path("cwd"),
        &[
            "relay",
            "keygen",
            "--config",
            "../config.toml",
            "--local",
            "laptop",
            "--listen",
            laptop_addr,
            "--peer",
            "mini",
            "--peer-listen",
            mini_addr,
        ],
    )
}

#[test]
fn keygens_blocks_pasted_verbatim_link_two_hubs_that_carry_mail_both_ways() {
    let mut laptop = hub_folder();
    let mut mini = hub_folder();
    let laptop_addr = free_port_on("127.0.0.2").to_string();
    let mini_addr = free_port_on("127.0.0.3").to_string();
    let out = keygen_laptop(&laptop, &laptop_addr, &mini_addr);
    out.assert_code(0);

    // The folder keygen made, the key in it, and the key never on the terminal.
    let key_path = laptop.path("keys/mini.key");
    assert_eq!(mode_of(&laptop.path("keys")), 0o700);
    assert_eq!(mode_of(&key_path), 0o600);
    let key = std::fs::read_to_string(&key_path).unwrap();
    assert!(is_hex64(key.trim_end()), "{key:?}");
    assert!(!out.stdout.contains(key.trim_end()), "{}", out.stdout);

    // The key file as laptop's config resolves it, though keygen ran in another folder.
    let laptop_block = block(&out.stdout, "laptop");
    assert_eq!(key_file_of(&laptop_block), "keys/mini.key");
    let mini_block = block(&out.stdout, "mini");
    paste(&mut laptop, &laptop_block);
    paste(&mut mini, &mini_block);
    copy_key(&key_path, &mini, &key_file_of(&mini_block));

    // laptop first, as a person starts them: its first dial finds nobody and backs off.
    let laptop = laptop.start();
    let mini = mini.start();
    for (hub, peer) in [(&laptop, "mini"), (&mini, "laptop")] {
        let row = wait_row(hub, peer, "up with bus-forward", |p| {
            p["state"] == "up" && has_feature(p, "bus-forward")
        });
        assert!(has_feature(&row, "frame-mac"), "{row}");
    }
    // The check the text and the guide give.
    let peers = server_in(
        &laptop.setup.path("cwd"),
        &["relay", "peers", "--config", "../config.toml"],
    );
    peers.assert_code(0);
    let row = peers
        .stdout
        .lines()
        .find(|l| l.starts_with("mini "))
        .unwrap_or_else(|| panic!("{}", peers.stdout));
    assert!(row.contains(" up "), "{}", peers.stdout);

    // Mail both ways, each awaited on the receiving hub.
    let there = laptop.cli_send("alpha", "beta@mini", "note", r#"{"n":1}"#);
    let got = await_one(&mini, "beta");
    assert_eq!(
        (&got["id"], &got["from"], &got["to"]),
        (&json!(there), &json!("alpha@laptop"), &json!("beta"))
    );
    assert_eq!(got["body"], json!({"n": 1}));
    let back = mini.cli_send("beta", "alpha@laptop", "note", r#"{"n":2}"#);
    let got = await_one(&laptop, "alpha");
    assert_eq!(
        (&got["id"], &got["from"], &got["to"]),
        (&json!(back), &json!("beta@mini"), &json!("alpha"))
    );
    for hub in [&laptop, &mini] {
        assert!(!hub.service_log().contains("without bus-forward"));
    }

    // A third hub for laptop: its config has a [relay] now, so only a peer entry is printed
    // for it, and the config with it pasted still loads.
    let third = server_in(
        &laptop.setup.path("cwd"),
        &[
            "relay",
            "keygen",
            "--config",
            "../config.toml",
            "--peer",
            "desk",
            "--peer-listen",
            &free_port_on("127.0.0.4").to_string(),
        ],
    );
    third.assert_code(0);
    let mine = block(&third.stdout, "laptop");
    assert!(!mine.contains("\n[relay]\n"), "{mine}");
    let config = format!(
        "{}{mine}",
        std::fs::read_to_string(laptop.setup.config_path()).unwrap()
    );
    let loaded = agent_hub_host::config::Config::parse(&config, &laptop.setup.dir.path)
        .unwrap_or_else(|e| panic!("{e}:\n{config}"));
    let ids: Vec<String> = loaded
        .relay
        .unwrap()
        .peers
        .into_iter()
        .map(|p| p.id)
        .collect();
    assert_eq!(ids, ["mini", "desk"]);
}

#[test]
fn keygen_refuses_what_could_not_link_and_a_refusal_writes_nothing() {
    let laptop = hub_folder();
    let cwd = laptop.path("cwd");
    let base = [
        "relay",
        "keygen",
        "--config",
        "../config.toml",
        "--peer",
        "mini",
    ];
    let cases: [(&[&str], &str); 7] = [
        (
            &[
                "--local",
                "laptop",
                "--listen",
                "127.0.0.2:0",
                "--peer-listen",
                "127.0.0.3:46121",
            ],
            "port 0",
        ),
        (
            &[
                "--local",
                "laptop",
                "--listen",
                "0.0.0.0:46111",
                "--peer-listen",
                "100.64.0.3:46111",
            ],
            "tailnet",
        ),
        (
            &[
                "--local",
                "laptop",
                "--listen",
                "127.0.0.1:46111",
                "--peer-listen",
                "100.64.0.3:46111",
            ],
            "loopback",
        ),
        (
            &[
                "--listen",
                "127.0.0.1:46111",
                "--peer-listen",
                "127.0.0.1:46121",
            ],
            "--local",
        ),
        (
            &["--local", "laptop", "--peer-listen", "127.0.0.1:46121"],
            "--listen",
        ),
        (
            &[
                "--local",
                "mini",
                "--listen",
                "127.0.0.1:46111",
                "--peer-listen",
                "127.0.0.1:46121",
            ],
            "own peer id",
        ),
        (
            &[
                "--local",
                "lap top",
                "--listen",
                "127.0.0.1:46111",
                "--peer-listen",
                "127.0.0.1:46121",
            ],
            "--local",
        ),
    ];
    for (rest, needle) in cases {
        let args: Vec<&str> = base.iter().chain(rest).copied().collect();
        let out = server_in(&cwd, &args);
        out.assert_code(1);
        assert!(out.stderr.contains(needle), "{args:?}: {}", out.stderr);
        assert!(!laptop.path("keys").exists(), "{args:?} wrote keys/");
    }
    // A config that is not there is named; nothing is made beside it.
    let out = server_in(
        &cwd,
        &[
            "relay",
            "keygen",
            "--config",
            "../nowhere/config.toml",
            "--local",
            "laptop",
            "--listen",
            "127.0.0.1:46111",
            "--peer",
            "mini",
            "--peer-listen",
            "127.0.0.1:46121",
        ],
    );
    out.assert_code(1);
    assert!(out.stderr.contains("nowhere/config.toml"), "{}", out.stderr);
    assert!(!laptop.path("nowhere").exists());

    // An existing key is kept unless --force, which writes a new one, still mode 600.
    let ok = keygen_laptop(&laptop, "127.0.0.1:46111", "127.0.0.1:46121");
    ok.assert_code(0);
    let key_path = laptop.path("keys/mini.key");
    let first = std::fs::read_to_string(&key_path).unwrap();
    let again = keygen_laptop(&laptop, "127.0.0.1:46111", "127.0.0.1:46121");
    again.assert_code(1);
    assert!(
        again.stderr.contains("mini.key") && again.stderr.contains("--force"),
        "{}",
        again.stderr
    );
    assert!(again.stdout.is_empty(), "{}", again.stdout);
    assert_eq!(std::fs::read_to_string(&key_path).unwrap(), first);
    let forced = server_in(
        &cwd,
        &[
            "relay",
            "keygen",
            "--config",
            "../config.toml",
            "--local",
            "laptop",
            "--listen",
            "127.0.0.1:46111",
            "--peer",
            "mini",
            "--peer-listen",
            "127.0.0.1:46121",
            "--force",
        ],
    );
    forced.assert_code(0);
    let second = std::fs::read_to_string(&key_path).unwrap();
    assert!(is_hex64(second.trim_end()) && second != first);
    assert_eq!(mode_of(&key_path), 0o600);

    // Without --config, --key-file is where the shell says, and the config gets it absolute.
    let out = server_in(
        &cwd,
        &[
            "relay",
            "keygen",
            "--key-file",
            "elsewhere/k.key",
            "--local",
            "laptop",
            "--listen",
            "127.0.0.1:46111",
            "--peer",
            "mini",
            "--peer-listen",
            "127.0.0.1:46121",
        ],
    );
    out.assert_code(0);
    let abs = std::fs::canonicalize(cwd.join("elsewhere/k.key")).unwrap();
    assert_eq!(
        key_file_of(&block(&out.stdout, "laptop")),
        abs.to_str().unwrap()
    );
    assert_eq!(mode_of(&cwd.join("elsewhere")), 0o700);
}

#[test]
fn a_claudectl_peers_block_links_with_an_acceptor_holding_the_key_as_claudectl_does() {
    let mut hub = hub_folder();
    // claudectl's `relay serve`: it only accepts, so the hub dials it.
    let listener = TcpListener::bind("127.0.0.3:0").unwrap();
    let ctl_addr = listener.local_addr().unwrap().to_string();
    let out = server_in(
        &hub.path("cwd"),
        &[
            "relay",
            "keygen",
            "--config",
            "../config.toml",
            "--local",
            "hub",
            "--listen",
            &free_port_on("127.0.0.2").to_string(),
            "--peer",
            "ctl",
            "--peer-listen",
            &ctl_addr,
            "--claudectl",
        ],
    );
    out.assert_code(0);
    assert!(
        !out.stdout.contains("# >>> ctl"),
        "claudectl takes files, not a config block"
    );
    assert!(
        out.stdout
            .contains("head -c 64 COPY-OF-THE-KEY-FILE > ~/.claudectl/relay/peers/hub.key"),
        "{}",
        out.stdout
    );
    paste(&mut hub, &block(&out.stdout, "hub"));
    // The 64 characters the text tells claudectl's side to keep.
    let key: String = std::fs::read_to_string(hub.path("keys/ctl.key"))
        .unwrap()
        .chars()
        .take(64)
        .collect();
    let hub = hub.start();
    let (mut conn, _handshake) = v0_accept_and_challenge(&listener, &key, "hub");
    conn.send("ctl", "handshake_ack", json!({"status": "ok"}));
    let row = wait_row(&hub, "ctl", "up", |p| p["state"] == "up");
    assert_eq!(row["proto"], 0, "{row}");
    assert!(!hub.service_log().contains("without bus-forward"));
}

#[test]
fn a_link_up_without_forward_on_the_other_side_is_named_and_mail_waits() {
    let mut laptop = hub_folder();
    let mut mini = hub_folder();
    let out = keygen_laptop(
        &laptop,
        &free_port_on("127.0.0.2").to_string(),
        &free_port_on("127.0.0.3").to_string(),
    );
    out.assert_code(0);
    let mini_block = block(&out.stdout, "mini");
    paste(&mut laptop, &block(&out.stdout, "laptop"));
    // The mistake: mini's entry for laptop left without forward.
    let edited = mini_block.replace("forward = true\n", "forward = false\n");
    assert_ne!(edited, mini_block);
    paste(&mut mini, &edited);
    copy_key(
        &laptop.path("keys/mini.key"),
        &mini,
        &key_file_of(&mini_block),
    );
    let laptop = laptop.start();
    let mini = mini.start();
    let row = wait_row(&laptop, "mini", "up", |p| p["state"] == "up");
    assert!(!has_feature(&row, "bus-forward"), "{row}");
    let log = laptop.wait_service_log("the missing forward named", |l| {
        l.contains("link with mini up without bus-forward")
    });
    assert!(
        log.contains("mini's config must set forward = true for \"laptop\""),
        "{log}"
    );
    // mini sets no forward for laptop: it has nothing to say.
    wait_row(&mini, "laptop", "up", |p| p["state"] == "up");
    assert!(!mini.service_log().contains("without bus-forward"));
    let id = laptop.cli_send("alpha", "beta@mini", "note", "{}");
    let st = laptop.cli("status", "alpha", &["--id", &id]);
    st.assert_code(0);
    assert!(st.stdout.contains("\"queued\""), "{}", st.stdout);
}
