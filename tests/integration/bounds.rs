//! No panic from configuration, client input or disk (issue 9): a config value past its
//! bound stops startup naming the key, a client's largest `timeoutSecs` parks like any other,
//! and a store damaged while the hub was down stops startup naming the row.

use crate::harness::*;

/// `timeoutSecs` is a u64 on the wire: 2^64 - 1 seconds is not representable as a deadline.
/// The hub parks the await as waiting forever, keeps serving, and hands it the next envelope.
#[test]
fn the_largest_await_timeout_parks_and_never_panics_the_hub() {
    let hub = Hub::start();
    let mut plain = hub.park("beta", r#"{"await":{"timeoutSecs":18446744073709551615}}"#);
    let mut acking = hub.park(
        "gamma",
        r#"{"await":{"timeoutSecs":18446744073709551614,"ack":true}}"#,
    );
    let id = hub.send("alpha", "beta", "task", None, "{\"n\":1}");
    assert_eq!(plain.envelope()["id"], id.as_str());
    let id2 = hub.send("alpha", "gamma", "task", None, "{\"n\":2}");
    assert_eq!(acking.envelope()["id"], id2.as_str());
    // Still up and serving.
    let id3 = hub.send("alpha", "delta", "task", None, "{}");
    assert_eq!(hub.drain("delta"), vec![id3]);
    assert!(!hub.stderr().contains("panicked"), "{}", hub.stderr());
}

#[test]
fn a_limit_past_its_bound_stops_startup_naming_the_key_and_the_bound() {
    let setup = Setup::new().with_limits(|l| l.ack_timeout_ms = 604_800_001);
    setup.fails_at(
        "config",
        "limits.ack_timeout_ms = 604800001 is above its upper bound of 604800000 (7 days)",
    );
    let setup = Setup::new().with_limits(|l| l.hub_max_bytes = usize::MAX / 4);
    setup.fails_at("config", "limits.hub_max_bytes = ");
}

/// Rows damaged while the hub was stopped: the next start fails at the store stage with the
/// row and the column, and says what to do; nothing from the envelope reaches stderr.
#[test]
fn a_store_damaged_while_the_hub_was_down_stops_startup_naming_the_row() {
    let mut hub = Setup::new().with_sqlite_store(64 * 1024 * 1024).start();
    hub.send("alpha", "beta", "task", None, "{\"secret\":\"BODY-77ac\"}");
    hub.send("alpha", "beta", "task", None, "{}");
    hub.terminate();
    let db = hub.setup.path("queue.db");
    {
        let c = rusqlite::Connection::open(&db).unwrap();
        let n = c
            .execute(
                "UPDATE envelopes SET attempts = -3 WHERE seq = (SELECT min(seq) FROM envelopes)",
                [],
            )
            .unwrap();
        assert_eq!(n, 1);
    }
    let out = hub
        .setup
        .fails_at("store", "attempts is -3, outside 0..=4294967295");
    assert!(out.stderr.contains("row seq "), "{}", out.stderr);
    assert!(
        out.stderr.contains("restore the store from a backup"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("BODY-77ac"), "{}", out.stderr);
    assert!(!hub.service_log().contains("BODY-77ac"));
}
