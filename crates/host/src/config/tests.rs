//! Tests of config parsing and validation across the tables (SPEC §7): the example config,
//! strict keys, each table's refusals and the bounds.

use super::*;

const EXAMPLE: &str = include_str!("../../../../config.example.toml");

#[test]
fn example_config_parses_to_example_limits() {
    let c = Config::parse(EXAMPLE, Path::new("/etc/hub")).unwrap();
    assert_eq!(c.limits, Limits::example());
    assert_eq!(c.port, 46110);
    assert_eq!(c.roster_path, PathBuf::from("/etc/hub/roster.toml"));
}

#[test]
fn missing_and_unknown_keys_are_fatal() {
    let missing = EXAMPLE.replace("port = 46110", "");
    let e = Config::parse(&missing, Path::new("/"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing field `port`"), "{e}");
    let unknown = format!("colour = \"red\"\n{EXAMPLE}");
    let e = Config::parse(&unknown, Path::new("/"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown field `colour`"), "{e}");
    let missing_limit = EXAMPLE.replace("write_timeout_ms = 30000", "");
    let e = Config::parse(&missing_limit, Path::new("/"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("write_timeout_ms"), "{e}");
}

#[test]
fn limits_to_toml_round_trips() {
    let mut l = Limits::example();
    l.ack_timeout_ms = 1234;
    let text = EXAMPLE[..EXAMPLE.find("[limits]").unwrap()].to_owned()
        + &crate::config::limits_to_toml(&l);
    assert_eq!(Config::parse(&text, Path::new("/")).unwrap().limits, l);
}

#[test]
fn zero_limits_are_refused() {
    let zero = EXAMPLE.replace("max_connections = 1024", "max_connections = 0");
    let e = Config::parse(&zero, Path::new("/"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("limits.max_connections must be greater than 0"),
        "{e}"
    );
}

#[test]
fn store_kinds_and_their_keys() {
    let sqlite = EXAMPLE.replace(
        "kind = \"memory\"",
        "kind = \"sqlite\"\npath = \"q.db\"\nmax_bytes = 1073741824\nsync = \"full\"",
    );
    let c = Config::parse(&sqlite, Path::new("/d")).unwrap();
    assert_eq!(
        c.store,
        StoreConfig::Sqlite {
            path: PathBuf::from("/d/q.db"),
            max_bytes: 1 << 30,
            sync: SyncPolicy::Full,
        }
    );
    let normal = sqlite.replace("\"full\"", "\"normal\"");
    assert!(matches!(
        Config::parse(&normal, Path::new("/d")).unwrap().store,
        StoreConfig::Sqlite {
            sync: SyncPolicy::Normal,
            ..
        }
    ));
    let odd = sqlite.replace("\"full\"", "\"off\"");
    assert!(Config::parse(&odd, Path::new("/"))
        .unwrap_err()
        .to_string()
        .contains("store.sync"));
    let half = EXAMPLE.replace("kind = \"memory\"", "kind = \"sqlite\"");
    assert!(Config::parse(&half, Path::new("/"))
        .unwrap_err()
        .to_string()
        .contains("needs store.path"));
    let stray = EXAMPLE.replace("kind = \"memory\"", "kind = \"memory\"\npath = \"q.db\"");
    assert!(Config::parse(&stray, Path::new("/"))
        .unwrap_err()
        .to_string()
        .contains("only for kind"));
    let odd = EXAMPLE.replace("kind = \"memory\"", "kind = \"redis\"");
    assert!(Config::parse(&odd, Path::new("/"))
        .unwrap_err()
        .to_string()
        .contains("\"redis\""));
}

const RELAY: &str = r#"
[relay]
peer_id = "laptop"
listen = "127.0.0.2:46111"
heartbeat_interval_ms = 30000
handshake_timeout_ms = 10000
reconnect_backoff_ms = [10000, 20000, 40000, 60000]
features = ["unknown-ok", "mutual-auth", "frame-bin", "lz4", "hb-delta"]
status_path = "relay-status.json"

[[relay.peers]]
id = "mini"
address = "127.0.0.3:46111"
key_file = "keys/mini.key"
allow_claudectl = true
"#;

#[test]
fn relay_table_is_optional_and_strict() {
    assert_eq!(Config::parse(EXAMPLE, Path::new("/d")).unwrap().relay, None);
    let c = Config::parse(&format!("{EXAMPLE}{RELAY}"), Path::new("/d")).unwrap();
    let r = c.relay.unwrap();
    assert_eq!(r.peer_id, "laptop");
    assert_eq!(r.listen, Some("127.0.0.2:46111".parse().unwrap()));
    assert_eq!(r.peers[0].key_file, PathBuf::from("/d/keys/mini.key"));
    assert!(!r.peers[0].forward, "forwarding is opt-in per peer");
    assert_eq!(r.forward_window, DEFAULT_FORWARD_WINDOW);
    // The example's commented relay table, uncommented, is a valid config.
    let uncommented: String = EXAMPLE
        .lines()
        .skip_while(|l| !l.starts_with("# [relay]"))
        .filter_map(|l| l.strip_prefix("# "))
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let c = Config::parse(&format!("{EXAMPLE}{uncommented}"), Path::new("/d")).unwrap();
    let r = c.relay.unwrap();
    assert!(r.peers[0].forward && r.features.contains(&"bus-forward".to_owned()));
    // Its peer is another agent-hub, so it links only with mutual-auth and frame-mac.
    assert!(!r.peers[0].allow_claudectl);
    assert_eq!(r.forward_window, 64);
    let cases = [
        (
            RELAY.replace("peer_id = \"laptop\"", "peer_id = \"lap top\""),
            "relay.peer_id",
        ),
        (
            RELAY.replace("\"hb-delta\"]", "\"hb-delta\", \"telepathy\"]"),
            "unknown feature",
        ),
        (
            RELAY.replace("id = \"mini\"", "id = \"laptop\""),
            "own peer_id",
        ),
        (
            RELAY.replace("id = \"mini\"", "id = \"auto\""),
            "relay.peers: \"auto\" is reserved for delegate --peer auto",
        ),
        (
            RELAY.replace("address = \"127.0.0.3:46111\"", "address = \"mini:46111\""),
            "not IP:port",
        ),
        (
            RELAY.replace(
                "reconnect_backoff_ms = [10000, 20000, 40000, 60000]",
                "reconnect_backoff_ms = []",
            ),
            "at least one",
        ),
        (
            RELAY.replace("allow_claudectl = true", ""),
            "allow_claudectl",
        ),
        (
            RELAY.replace(
                "allow_claudectl = true",
                "allow_claudectl = true\nforward = true",
            ),
            "does not list \"bus-forward\"",
        ),
        (
            RELAY.replace(
                "status_path = \"relay-status.json\"",
                "status_path = \"relay-status.json\"\nforward_window = 0",
            ),
            "forward_window must be greater than 0",
        ),
    ];
    for (relay, want) in cases {
        let e = Config::parse(&format!("{EXAMPLE}{relay}"), Path::new("/d"))
            .unwrap_err()
            .to_string();
        assert!(e.contains(want), "{want}: {e}");
    }
}

#[test]
fn frame_mac_is_implied_by_its_prerequisites_and_required_without_v0() {
    let parse = |relay: &str| Config::parse(&format!("{EXAMPLE}{relay}"), Path::new("/d"));
    let r = parse(RELAY).unwrap().relay.unwrap();
    assert_eq!(
        r.features[r.features.len() - 2..],
        ["frame-mac", "task-approvals"],
        "{:?}",
        r.features
    );
    let listed = RELAY.replace("\"hb-delta\"]", "\"hb-delta\", \"frame-mac\"]");
    let r = parse(&listed).unwrap().relay.unwrap();
    assert_eq!(r.features.iter().filter(|f| *f == "frame-mac").count(), 1);
    let no_bin = RELAY.replace("\"frame-bin\", ", "");
    let r = parse(&no_bin).unwrap().relay.unwrap();
    assert!(
        !r.features.contains(&"frame-mac".to_owned()),
        "{:?}",
        r.features
    );
    let e = parse(&no_bin.replace("\"hb-delta\"]", "\"hb-delta\", \"frame-mac\"]"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("needs \"frame-bin\" and \"mutual-auth\""), "{e}");
    let strict = RELAY
        .replace("allow_claudectl = true", "allow_claudectl = false")
        .replace("\"mutual-auth\", ", "");
    let e = parse(&strict).unwrap_err().to_string();
    assert!(
        e.contains("\"mini\" has allow_claudectl = false") && e.contains("must list"),
        "{e}"
    );
    assert!(parse(&RELAY.replace("allow_claudectl = true", "allow_claudectl = false")).is_ok());
}

/// `task-approvals` (issue 37 design §7) rides only where frame-mac does: implied with it,
/// listed once when listed, absent without frame-mac's prerequisites, and refused when listed
/// without them (that hub could never agree it).
#[test]
fn task_approvals_is_implied_with_frame_mac_and_refused_without_it() {
    let parse = |relay: &str| Config::parse(&format!("{EXAMPLE}{relay}"), Path::new("/d"));
    let listed = RELAY.replace("\"hb-delta\"]", "\"hb-delta\", \"task-approvals\"]");
    let r = parse(&listed).unwrap().relay.unwrap();
    assert_eq!(
        r.features.iter().filter(|f| *f == "task-approvals").count(),
        1,
        "{:?}",
        r.features
    );
    let no_bin = RELAY.replace("\"frame-bin\", ", "");
    let r = parse(&no_bin).unwrap().relay.unwrap();
    assert!(
        !r.features.contains(&"task-approvals".to_owned()),
        "{:?}",
        r.features
    );
    let e = parse(&no_bin.replace("\"hb-delta\"]", "\"hb-delta\", \"task-approvals\"]"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("\"task-approvals\", which needs \"frame-bin\" and \"mutual-auth\""),
        "{e}"
    );
}

#[test]
fn relay_limits_are_optional_with_defaults_and_bounded() {
    let parse = |extra: &str| {
        let relay = RELAY.replace(
            "status_path = \"relay-status.json\"",
            &format!("status_path = \"relay-status.json\"\n{extra}"),
        );
        Config::parse(&format!("{EXAMPLE}{relay}"), Path::new("/d"))
    };
    let r = parse("").unwrap().relay.unwrap();
    assert_eq!(r.limits, RelayLimits::default());
    assert_eq!(
        (
            r.limits.max_connections,
            r.limits.max_unauthenticated,
            r.limits.max_connections_per_address,
            r.limits.max_peer_agents,
            r.limits.max_peer_directory_bytes
        ),
        (64, 16, 8, 1024, 262_144)
    );
    let set = "max_connections = 10\nmax_unauthenticated = 4\nmax_connections_per_address = 2\n\
               max_peer_agents = 4096\nmax_peer_directory_bytes = 1048576";
    let r = parse(set).unwrap().relay.unwrap();
    assert_eq!(
        r.limits,
        RelayLimits {
            max_connections: 10,
            max_unauthenticated: 4,
            max_connections_per_address: 2,
            max_peer_agents: 4096,
            max_peer_directory_bytes: 1 << 20,
        }
    );
    // The example's commented caps are the defaults.
    let example: String = EXAMPLE
        .lines()
        .skip_while(|l| !l.starts_with("# [relay]"))
        .filter_map(|l| l.strip_prefix("# max_").map(|k| format!("max_{k}\n")))
        .collect();
    assert_eq!(example.lines().count(), 5, "{example}");
    assert_eq!(
        parse(&example).unwrap().relay.unwrap().limits,
        RelayLimits::default()
    );
    // Lowering max_connections alone lowers the defaults it bounds.
    let r = parse("max_connections = 4").unwrap().relay.unwrap();
    assert_eq!(
        (
            r.limits.max_unauthenticated,
            r.limits.max_connections_per_address
        ),
        (4, 4)
    );
    let refused = [
        ("max_connections = 0", "relay.max_connections is 0"),
        ("max_connections = 65537", "from 1 to 65536"),
        ("max_unauthenticated = 0", "relay.max_unauthenticated is 0"),
        (
            "max_unauthenticated = 65",
            "from 1 to 64 (relay.max_connections)",
        ),
        (
            "max_connections = 4\nmax_connections_per_address = 5",
            "relay.max_connections_per_address is 5",
        ),
        ("max_peer_agents = 4097", "from 1 to 4096"),
        (
            "max_peer_directory_bytes = 0",
            "max_peer_directory_bytes is 0",
        ),
        ("max_peer_directory_bytes = 1048577", "from 1 to 1048576"),
        ("max_peer_agents = -1", "expected usize"),
        ("max_connexions = 3", "unknown field"),
    ];
    for (extra, want) in refused {
        let e = parse(extra).unwrap_err().to_string();
        assert!(e.contains(want), "{extra}: {e}");
    }
}

#[test]
fn absolute_paths_stay() {
    let abs = EXAMPLE.replace(
        "audit_log_path = \"audit.jsonl\"",
        "audit_log_path = \"/var/log/a.jsonl\"",
    );
    let c = Config::parse(&abs, Path::new("/etc/hub")).unwrap();
    assert_eq!(c.audit_log_path, PathBuf::from("/var/log/a.jsonl"));
}

/// `max_deliveries` is optional (older configs load with the default) and bounded.
#[test]
fn max_deliveries_defaults_and_is_bounded() {
    let without = EXAMPLE.replace("max_deliveries = 10\n", "");
    assert_ne!(without, EXAMPLE, "the example config sets it");
    let c = Config::parse(&without, Path::new("/")).unwrap();
    assert_eq!(c.limits.max_deliveries, DEFAULT_MAX_DELIVERIES);
    for (v, ok) in [("1", true), ("10000", true), ("0", false), ("10001", false)] {
        let text = EXAMPLE.replace("max_deliveries = 10\n", &format!("max_deliveries = {v}\n"));
        match Config::parse(&text, Path::new("/")) {
            Ok(c) => assert!(ok, "{v} accepted: {:?}", c.limits.max_deliveries),
            Err(e) => {
                assert!(!ok, "{v} refused: {e}");
                assert!(
                    e.to_string()
                        .contains("limits.max_deliveries must be between 1 and 10000"),
                    "{e}"
                );
            }
        }
    }
    let negative = EXAMPLE.replace("max_deliveries = 10\n", "max_deliveries = -1\n");
    assert!(Config::parse(&negative, Path::new("/")).is_err());
}

#[test]
fn store_backlog_max_bytes_defaults_and_is_bounded() {
    let key = "store_backlog_max_bytes = 16777216\n";
    let without = EXAMPLE.replace(key, "");
    assert_ne!(without, EXAMPLE, "the example config sets it");
    let c = Config::parse(&without, Path::new("/")).unwrap();
    assert_eq!(
        c.limits.store_backlog_max_bytes,
        DEFAULT_STORE_BACKLOG_MAX_BYTES
    );
    for (v, ok) in [
        ("65536", true),
        ("1073741824", true),
        ("65535", false),
        ("1073741825", false),
        ("0", false),
    ] {
        let text = EXAMPLE.replace(key, &format!("store_backlog_max_bytes = {v}\n"));
        match Config::parse(&text, Path::new("/")) {
            Ok(_) => assert!(ok, "{v} accepted"),
            Err(e) => {
                assert!(!ok, "{v} refused: {e}");
                assert!(
                    e.to_string().contains(
                        "limits.store_backlog_max_bytes must be between 65536 and 1073741824"
                    ),
                    "{e}"
                );
            }
        }
    }
}

/// `relay.liveness_update_ms` (docs/relay-protocol.md §5 "Liveness"): optional, 1000 by
/// default or the interval if shorter, 0 turns feature `liveness` off, otherwise bounded by
/// 100 and the heartbeat interval; the feature is offered without being listed.
#[test]
fn liveness_update_ms_defaults_offers_the_feature_and_is_bounded() {
    let parse = |extra: &str, interval: &str| {
        let relay = RELAY
            .replace("heartbeat_interval_ms = 30000", interval)
            .replace("[[relay.peers]]", &format!("{extra}\n[[relay.peers]]"));
        Config::parse(&format!("{EXAMPLE}{relay}"), Path::new("/d"))
    };
    let r = parse("", "heartbeat_interval_ms = 30000")
        .unwrap()
        .relay
        .unwrap();
    assert_eq!(r.liveness_update_ms, 1000);
    assert_eq!(r.features.iter().filter(|f| *f == "liveness").count(), 1);
    assert_eq!(
        r.features[r.features.len() - 2..],
        ["frame-mac", "task-approvals"],
        "frame-mac and task-approvals are still settled last: {:?}",
        r.features
    );
    let r = parse("", "heartbeat_interval_ms = 200")
        .unwrap()
        .relay
        .unwrap();
    assert_eq!(r.liveness_update_ms, 200, "never above the interval");
    let r = parse("liveness_update_ms = 0", "heartbeat_interval_ms = 30000")
        .unwrap()
        .relay
        .unwrap();
    assert_eq!(r.liveness_update_ms, 0);
    assert!(
        !r.features.iter().any(|f| f == "liveness"),
        "off: not offered"
    );
    let r = parse("liveness_update_ms = 250", "heartbeat_interval_ms = 30000")
        .unwrap()
        .relay
        .unwrap();
    assert_eq!(r.liveness_update_ms, 250);
    for (value, interval) in [("99", "30000"), ("30001", "30000"), ("1000", "500")] {
        let e = parse(
            &format!("liveness_update_ms = {value}"),
            &format!("heartbeat_interval_ms = {interval}"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(&format!(
                "relay.liveness_update_ms is {value}; it must be 0 (off) or from 100 to relay.heartbeat_interval_ms ({interval})"
            )),
            "{value}: {e}"
        );
    }
    let listed = RELAY.replace("\"hb-delta\"]", "\"hb-delta\", \"liveness\"]");
    let listed = listed.replace("[[relay.peers]]", "liveness_update_ms = 0\n[[relay.peers]]");
    let e = Config::parse(&format!("{EXAMPLE}{listed}"), Path::new("/d"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("relay.liveness_update_ms = 0 turns it off"),
        "{e}"
    );
}

/// `limits.idempotency_max_bytes` (issue 29): optional, 256 MiB by default, 1 MiB to 1 TiB.
#[test]
fn idempotency_max_bytes_defaults_and_is_bounded() {
    let key = "idempotency_max_bytes = 268435456\n";
    let without = EXAMPLE.replace(key, "");
    assert_ne!(without, EXAMPLE, "the example config sets it");
    let c = Config::parse(&without, Path::new("/")).unwrap();
    assert_eq!(
        c.limits.idempotency_max_bytes,
        DEFAULT_IDEMPOTENCY_MAX_BYTES
    );
    for (v, want) in [
        ("1048576", None),
        ("1099511627776", None),
        ("1048575", Some("limits.idempotency_max_bytes must be at least 1048576 (1 MiB)")),
        (
            "1099511627777",
            Some("limits.idempotency_max_bytes = 1099511627777 is above its upper bound of 1099511627776 (1 TiB)"),
        ),
        ("0", Some("limits.idempotency_max_bytes must be at least 1048576 (1 MiB)")),
    ] {
        let text = EXAMPLE.replace(key, &format!("idempotency_max_bytes = {v}\n"));
        match (Config::parse(&text, Path::new("/")), want) {
            (Ok(_), None) => {}
            (Err(e), Some(want)) => assert_eq!(e.to_string(), format!("config is invalid: {want}")),
            (other, _) => panic!("{v}: {other:?}"),
        }
    }
}

/// `operators` (issue 29, SPEC §14 "Visibility"): optional, empty by default; each a name
/// that could be on the roster, never the hub or a task identity, none twice.
#[test]
fn operators_default_to_none_and_must_be_roster_names() {
    let c = Config::parse(EXAMPLE, Path::new("/")).unwrap();
    assert!(c.operators.is_empty());
    let without = EXAMPLE.replace("operators = []\n", "");
    assert_ne!(without, EXAMPLE, "the example config sets it");
    assert!(Config::parse(&without, Path::new("/"))
        .unwrap()
        .operators
        .is_empty());
    let with = |list: &str| EXAMPLE.replace("operators = []", &format!("operators = {list}"));
    let c = Config::parse(&with(r#"["ops", "alice"]"#), Path::new("/")).unwrap();
    assert_eq!(c.operators, ["ops", "alice"]);
    for (list, want) in [
        (r#"[" "]"#, "operators[0] is blank"),
        (r#"["ops", "HUB"]"#, "operators[1] names the hub or a task identity, never an operator"),
        (r#"["task-1"]"#, "operators[0] names the hub or a task identity, never an operator"),
        (r#"["ops", "ops"]"#, "operators[1] is listed twice"),
        (
            r#"["o\u001b]0;x\u0007"]"#,
            "operators[0] is not a roster name (at most 256 bytes, no control or formatting characters)",
        ),
    ] {
        let e = Config::parse(&with(list), Path::new("/")).unwrap_err();
        assert_eq!(e.to_string(), format!("config is invalid: {want}"), "{list}");
    }
    let many: Vec<String> = (0..=MAX_OPERATORS).map(|i| format!("\"o{i}\"")).collect();
    let e = Config::parse(&with(&format!("[{}]", many.join(","))), Path::new("/")).unwrap_err();
    assert!(e.to_string().contains("more than 256"), "{e}");
}
