//! Upper (and lower) bounds on every duration, size and count in the config, checked at
//! startup (docs/operations.md, "Bounds on config values").
//!
//! Owns the bound of each key and the one error shape for a value outside it: the key, the
//! value and the bound, in the key's own unit. The bounds are generous for any real
//! deployment and small enough that no deadline, multiple or buffer computed from a value can
//! overflow: the largest duration is 365 days, far from the ~292 years `Instant` and
//! `Duration` arithmetic can take, so `now + timeout`, `interval * 3` and `secs * 1000` are
//! exact. A new key gets a constant here and one `check_*` call where it is validated.

use super::ConfigError;

const SECOND_MS: u64 = 1000;
const MINUTE_MS: u64 = 60 * SECOND_MS;
const HOUR_MS: u64 = 60 * MINUTE_MS;
const DAY_MS: u64 = 24 * HOUR_MS;
const KIB: u64 = 1024;
const MIB: u64 = 1024 * KIB;
const GIB: u64 = 1024 * MIB;
const TIB: u64 = 1024 * GIB;

/// `limits.max_line_bytes`: a line is buffered whole, per connection, before it is parsed.
pub const MAX_LINE_BYTES: u64 = 64 * MIB;
/// `limits.max_connections`: each connection holds a descriptor; 2^20 is Linux's default
/// ceiling on descriptors per process (`fs.nr_open`).
pub const MAX_CONNECTIONS: u64 = 1 << 20;
/// `limits.hello_timeout_ms`, `verb_timeout_ms`, `write_timeout_ms`: a client that needs a day
/// for one line is gone.
pub const MAX_CLIENT_TIMEOUT_MS: u64 = DAY_MS;
/// `limits.ack_timeout_ms`: an ack-mode reader may hold an envelope through a long job.
pub const MAX_ACK_TIMEOUT_MS: u64 = 7 * DAY_MS;
/// `limits.queue_max_envelopes`.
pub const MAX_QUEUE_ENVELOPES: u64 = 100_000_000;
/// `limits.queue_max_bytes` and `limits.hub_max_bytes`: queued text is held in memory.
pub const MAX_QUEUE_BYTES: u64 = TIB;
/// `limits.idempotency_window_secs`: a year of remembered ids.
pub const MAX_IDEMPOTENCY_WINDOW_SECS: u64 = 365 * 24 * 3600;
/// `limits.idempotency_max_ids`: about 200 bytes of memory each, so 20 GB at the bound.
pub const MAX_IDEMPOTENCY_IDS: u64 = 100_000_000;
/// `store.max_bytes`, lower bound: room for the schema and a few envelopes.
pub const MIN_STORE_BYTES: u64 = MIB;
/// `store.max_bytes`: SQLite's page count tops out at 2^32 - 2 pages, 16 TiB at 4 KiB pages.
pub const MAX_STORE_BYTES: u64 = 16 * TIB;
/// `relay.heartbeat_interval_ms`: a peer is declared dead after 3 silent intervals.
pub const MAX_HEARTBEAT_INTERVAL_MS: u64 = HOUR_MS;
/// `relay.handshake_timeout_ms`.
pub const MAX_HANDSHAKE_TIMEOUT_MS: u64 = 10 * MINUTE_MS;
/// Each wait in `relay.reconnect_backoff_ms`.
pub const MAX_BACKOFF_MS: u64 = DAY_MS;
/// Waits listed in `relay.reconnect_backoff_ms`.
pub const MAX_BACKOFF_STEPS: u64 = 64;
/// `relay.forward_window`: envelopes in flight to one peer (also capped by a 2 MiB byte
/// budget, `hub::forward::FORWARD_WINDOW_BYTES`).
pub const MAX_FORWARD_WINDOW: u64 = 65_536;

/// What a value counts, so its bound reads in the key's own unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Millis,
    Secs,
    Bytes,
    Count,
}

/// Refuses `value` outside `min..=max`, naming the key, the value and the bound. A zero below
/// a minimum of 1 reads "must be greater than 0", as every positive key always has.
pub fn check(key: &str, value: u64, min: u64, max: u64, unit: Unit) -> Result<(), ConfigError> {
    if value < min {
        return Err(ConfigError::Invalid(if min == 1 {
            format!("{key} must be greater than 0")
        } else {
            format!("{key} must be at least {min}{}", human(min, unit))
        }));
    }
    if value > max {
        return Err(ConfigError::Invalid(format!(
            "{key} = {value} is above its upper bound of {max}{}",
            human(max, unit)
        )));
    }
    Ok(())
}

/// A positive duration in milliseconds, at most `max_ms`.
pub fn check_duration_ms(key: &str, value: u64, max_ms: u64) -> Result<(), ConfigError> {
    check(key, value, 1, max_ms, Unit::Millis)
}

/// A positive duration in seconds, at most `max_secs`.
pub fn check_duration_secs(key: &str, value: u64, max_secs: u64) -> Result<(), ConfigError> {
    check(key, value, 1, max_secs, Unit::Secs)
}

/// A positive size in bytes, at most `max_bytes`.
pub fn check_bytes(key: &str, value: u64, max_bytes: u64) -> Result<(), ConfigError> {
    check(key, value, 1, max_bytes, Unit::Bytes)
}

/// A positive count, at most `max`.
pub fn check_count(key: &str, value: u64, max: u64) -> Result<(), ConfigError> {
    check(key, value, 1, max, Unit::Count)
}

/// " (7 days)", " (64 MiB)": the bound in words when it is a round number of a larger unit.
fn human(v: u64, unit: Unit) -> String {
    let steps: &[(u64, &str)] = match unit {
        Unit::Millis => &[
            (DAY_MS, "day"),
            (HOUR_MS, "hour"),
            (MINUTE_MS, "minute"),
            (SECOND_MS, "second"),
        ],
        Unit::Secs => &[(24 * 3600, "day"), (3600, "hour"), (60, "minute")],
        Unit::Bytes => &[(TIB, "TiB"), (GIB, "GiB"), (MIB, "MiB"), (KIB, "KiB")],
        Unit::Count => &[],
    };
    for &(size, name) in steps {
        if v >= size && v % size == 0 {
            let n = v / size;
            let plural = if n != 1 && unit != Unit::Bytes {
                "s"
            } else {
                ""
            };
            return format!(" ({n} {name}{plural})");
        }
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::super::{Config, Limits};
    use super::*;
    use std::path::Path;

    const EXAMPLE: &str = include_str!("../../../../config.example.toml");

    fn parse_err(text: &str) -> String {
        Config::parse(text, Path::new("/d"))
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn errors_name_the_key_the_value_and_the_bound() {
        let e = check_duration_ms("limits.ack_timeout_ms", 604_800_001, MAX_ACK_TIMEOUT_MS)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "config is invalid: limits.ack_timeout_ms = 604800001 is above its upper bound of 604800000 (7 days)"
        );
        let e = check_bytes("x", u64::MAX, MAX_QUEUE_BYTES)
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with("= 18446744073709551615 is above its upper bound of 1099511627776 (1 TiB)"),
            "{e}"
        );
        assert_eq!(
            check_count("c", 0, 5).unwrap_err().to_string(),
            "config is invalid: c must be greater than 0"
        );
        assert!(check_count("c", 5, 5).is_ok() && check_count("c", 1, 5).is_ok());
        assert_eq!(human(90_000, Unit::Millis), " (90 seconds)");
        assert_eq!(human(1_500, Unit::Millis), "");
        assert_eq!(human(3600, Unit::Secs), " (1 hour)");
    }

    /// Every `[limits]` key has an upper bound: the bound itself loads, one more is refused
    /// with the key in the message.
    #[test]
    fn every_limit_is_bounded() {
        type Set = fn(&mut Limits, u64);
        let keys: [(&str, u64, Set); 14] = [
            ("max_line_bytes", MAX_LINE_BYTES, |l, v| {
                l.max_line_bytes = v as usize
            }),
            ("max_connections", MAX_CONNECTIONS, |l, v| {
                l.max_connections = v as usize
            }),
            ("hello_timeout_ms", MAX_CLIENT_TIMEOUT_MS, |l, v| {
                l.hello_timeout_ms = v
            }),
            ("verb_timeout_ms", MAX_CLIENT_TIMEOUT_MS, |l, v| {
                l.verb_timeout_ms = v
            }),
            ("write_timeout_ms", MAX_CLIENT_TIMEOUT_MS, |l, v| {
                l.write_timeout_ms = v
            }),
            ("queue_max_envelopes", MAX_QUEUE_ENVELOPES, |l, v| {
                l.queue_max_envelopes = v as usize
            }),
            ("queue_max_bytes", MAX_QUEUE_BYTES, |l, v| {
                l.queue_max_bytes = v as usize
            }),
            ("hub_max_bytes", MAX_QUEUE_BYTES, |l, v| {
                l.hub_max_bytes = v as usize
            }),
            ("ack_timeout_ms", MAX_ACK_TIMEOUT_MS, |l, v| {
                l.ack_timeout_ms = v
            }),
            (
                "idempotency_window_secs",
                MAX_IDEMPOTENCY_WINDOW_SECS,
                |l, v| l.idempotency_window_secs = v,
            ),
            ("idempotency_max_ids", MAX_IDEMPOTENCY_IDS, |l, v| {
                l.idempotency_max_ids = v as usize
            }),
            ("answer_linger_ms", MAX_CLIENT_TIMEOUT_MS, |l, v| {
                l.answer_linger_ms = v
            }),
            ("max_status_waits", MAX_CONNECTIONS, |l, v| {
                l.max_status_waits = v as usize
            }),
            (
                "service_log_flush_ms",
                crate::config::MAX_SERVICE_LOG_FLUSH_MS,
                |l, v| l.service_log_flush_ms = v,
            ),
        ];
        let head = &EXAMPLE[..EXAMPLE.find("[limits]").unwrap()];
        for (key, max, set) in keys {
            for (value, ok) in [(max, true), (max + 1, false), (u64::MAX / 2, false)] {
                let mut l = Limits::example();
                set(&mut l, value);
                let text = format!("{head}{}", crate::config::limits_to_toml(&l));
                match Config::parse(&text, Path::new("/d")) {
                    Ok(c) => {
                        assert!(ok, "{key} = {value} loaded");
                        assert_eq!(c.limits, l);
                    }
                    Err(e) => {
                        assert!(!ok, "{key} = {value}: {e}");
                        let e = e.to_string();
                        assert!(
                            e.contains(&format!(
                                "limits.{key} = {value} is above its upper bound of {max}"
                            )),
                            "{e}"
                        );
                    }
                }
            }
        }
    }

    /// The answer linger is the one duration that may be 0 (end the connection at the reply).
    #[test]
    fn the_answer_linger_may_be_zero() {
        let head = &EXAMPLE[..EXAMPLE.find("[limits]").unwrap()];
        let mut l = Limits::example();
        l.answer_linger_ms = 0;
        let c = Config::parse(
            &format!("{head}{}", crate::config::limits_to_toml(&l)),
            Path::new("/d"),
        )
        .unwrap();
        assert_eq!(c.limits.answer_linger_ms, 0);
        let without = format!("{head}{}", crate::config::limits_to_toml(&l))
            .replace("answer_linger_ms = 0\n", "");
        let c = Config::parse(&without, Path::new("/d")).unwrap();
        assert_eq!(
            c.limits.answer_linger_ms,
            crate::config::DEFAULT_ANSWER_LINGER_MS
        );
    }

    /// `service_log_flush_ms` is optional (configs from before issue 13 keep loading) and may
    /// be 0 (every loop iteration writes its lines).
    #[test]
    fn the_service_log_flush_defaults_and_may_be_zero() {
        let head = &EXAMPLE[..EXAMPLE.find("[limits]").unwrap()];
        let mut l = Limits::example();
        let without = format!("{head}{}", crate::config::limits_to_toml(&l))
            .replace("service_log_flush_ms = 100\n", "");
        assert!(!without.contains("service_log_flush_ms"));
        let c = Config::parse(&without, Path::new("/d")).unwrap();
        assert_eq!(
            c.limits.service_log_flush_ms,
            crate::config::DEFAULT_SERVICE_LOG_FLUSH_MS
        );
        l.service_log_flush_ms = 0;
        let c = Config::parse(
            &format!("{head}{}", crate::config::limits_to_toml(&l)),
            Path::new("/d"),
        )
        .unwrap();
        assert_eq!(c.limits.service_log_flush_ms, 0);
    }

    /// `max_status_waits` is optional (configs from before receipts keep loading) and at
    /// least 1.
    #[test]
    fn max_status_waits_defaults_and_refuses_zero() {
        let head = &EXAMPLE[..EXAMPLE.find("[limits]").unwrap()];
        let l = Limits::example();
        let without = format!("{head}{}", crate::config::limits_to_toml(&l))
            .replace("max_status_waits = 1024\n", "");
        assert!(!without.contains("max_status_waits"));
        let c = Config::parse(&without, Path::new("/d")).unwrap();
        assert_eq!(
            c.limits.max_status_waits,
            crate::config::DEFAULT_MAX_STATUS_WAITS
        );
        let mut zero = Limits::example();
        zero.max_status_waits = 0;
        let e = Config::parse(
            &format!("{head}{}", crate::config::limits_to_toml(&zero)),
            Path::new("/d"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("limits.max_status_waits"), "{e}");
    }

    /// The two shares of the connection cap (issue 29) are optional: absent, a quarter of
    /// `max_connections` (at least 1); present, 1 ..= `max_connections`.
    #[test]
    fn the_connection_shares_default_to_a_quarter_and_stay_within_the_cap() {
        let head = &EXAMPLE[..EXAMPLE.find("[limits]").unwrap()];
        let parse = |l: &Limits| {
            Config::parse(
                &format!("{head}{}", crate::config::limits_to_toml(l)),
                Path::new("/d"),
            )
        };
        let mut l = Limits::example();
        assert!(!crate::config::limits_to_toml(&l).contains("max_unauthenticated"));
        let c = parse(&l).unwrap();
        assert_eq!(c.limits.max_unauthenticated(), 256);
        assert_eq!(c.limits.max_connections_per_agent(), 256);
        for (conns, share) in [(1, 1), (3, 1), (4, 1), (7, 1), (8, 2), (1_048_576, 262_144)] {
            l.max_connections = conns;
            let c = parse(&l).unwrap();
            assert_eq!(c.limits.max_unauthenticated(), share, "{conns}");
            assert_eq!(c.limits.max_connections_per_agent(), share, "{conns}");
        }
        l.max_connections = 100;
        l.max_unauthenticated = Some(100);
        l.max_connections_per_agent = Some(7);
        let c = parse(&l).unwrap();
        assert_eq!(
            (
                c.limits.max_unauthenticated(),
                c.limits.max_connections_per_agent()
            ),
            (100, 7)
        );
        for (unauth, per_agent, want) in [
            (
                Some(101),
                None,
                "limits.max_unauthenticated = 101 is above limits.max_connections (100)",
            ),
            (
                None,
                Some(101),
                "limits.max_connections_per_agent = 101 is above limits.max_connections (100)",
            ),
            (
                Some(0),
                None,
                "limits.max_unauthenticated must be greater than 0",
            ),
            (
                None,
                Some(0),
                "limits.max_connections_per_agent must be greater than 0",
            ),
        ] {
            l.max_unauthenticated = unauth;
            l.max_connections_per_agent = per_agent;
            let e = parse(&l).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn the_store_size_is_bounded_both_ways() {
        let sqlite = |bytes: u64| {
            EXAMPLE.replace(
                "kind = \"memory\"",
                &format!(
                    "kind = \"sqlite\"\npath = \"q.db\"\nmax_bytes = {bytes}\nsync = \"full\""
                ),
            )
        };
        assert!(Config::parse(&sqlite(MAX_STORE_BYTES), Path::new("/d")).is_ok());
        let e = parse_err(&sqlite(MAX_STORE_BYTES + 1));
        assert!(
            e.contains("store.max_bytes = 17592186044417 is above its upper bound of 17592186044416 (16 TiB)"),
            "{e}"
        );
        let e = parse_err(&sqlite(MIN_STORE_BYTES - 1));
        assert!(
            e.contains("store.max_bytes must be at least 1048576 (1 MiB)"),
            "{e}"
        );
    }

    #[test]
    fn every_relay_duration_and_size_is_bounded() {
        const RELAY: &str = "
[relay]
peer_id = \"laptop\"
listen = \"\"
heartbeat_interval_ms = 30000
handshake_timeout_ms = 10000
reconnect_backoff_ms = [10000, 60000]
features = [\"unknown-ok\"]
status_path = \"relay-status.json\"
forward_window = 64
";
        let base = format!("{EXAMPLE}{RELAY}");
        assert!(Config::parse(&base, Path::new("/d")).is_ok());
        let cases = [
            (
                "heartbeat_interval_ms = 30000",
                "heartbeat_interval_ms = 3600001",
                "relay.heartbeat_interval_ms = 3600001 is above its upper bound of 3600000 (1 hour)",
            ),
            (
                "heartbeat_interval_ms = 30000",
                "heartbeat_interval_ms = 0",
                "relay.heartbeat_interval_ms must be greater than 0",
            ),
            (
                "handshake_timeout_ms = 10000",
                "handshake_timeout_ms = 600001",
                "relay.handshake_timeout_ms = 600001 is above its upper bound of 600000 (10 minutes)",
            ),
            (
                "[10000, 60000]",
                "[10000, 86400001]",
                "relay.reconnect_backoff_ms = 86400001 is above its upper bound of 86400000 (1 day)",
            ),
            (
                "[10000, 60000]",
                "[10000, 0]",
                "relay.reconnect_backoff_ms must list at least one wait, each greater than 0",
            ),
            (
                "forward_window = 64",
                "forward_window = 65537",
                "relay.forward_window = 65537 is above its upper bound of 65536",
            ),
        ];
        for (from, to, want) in cases {
            let e = parse_err(&base.replace(from, to));
            assert!(e.contains(want), "{to}: {e}");
        }
        let many = format!("[{}]", vec!["1000"; 65].join(", "));
        let e = parse_err(&base.replace("[10000, 60000]", &many));
        assert!(
            e.contains(
                "relay.reconnect_backoff_ms lists 65 waits, more than its upper bound of 64"
            ),
            "{e}"
        );
    }
}
