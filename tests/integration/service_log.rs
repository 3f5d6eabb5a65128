//! The service log's buffering (docs/operations.md, "Service log"; `limits.service_log_flush_ms`):
//! INFO lines wait in the hub for at most the flush interval and go out in one append, the
//! interval's timer writes them with no other activity to wake the loop, and SIGTERM writes
//! what waits before the process ends, so a stop never loses a line (only a SIGKILL may lose
//! the last interval's, which is documented).
//!
//! Owns the end-to-end check of those three promises with the real binary. The buffer's rules
//! (WARN at once, the size bound, a zero interval) are unit-tested on a fake sink in
//! `crates/server/src/event_loop/records.rs`.

use crate::harness::*;
use std::time::{Duration, Instant};

/// The line the hub logs for a send's connection once the client has closed it.
fn accepted_line(log: &str) -> bool {
    log.lines()
        .any(|l| l.contains(" INFO ") && l.contains("verb=send outcome=accepted"))
}

/// With the longest interval, the send's connection line is not written while the hub runs
/// (checked only while well inside the interval, so a stalled machine cannot fail it), and
/// SIGTERM writes it, with the stop's own lines after it: the last line is `hub stopped`.
#[test]
fn sigterm_writes_the_buffered_lines_before_the_hub_exits() {
    let mut hub = Hub::with_limits(|l| {
        l.service_log_flush_ms = agent_hub_host::config::MAX_SERVICE_LOG_FLUSH_MS
    });
    let started = Instant::now();
    hub.send("alpha", "beta", "note", None, "{\"n\":1}");
    // The envelope is taken, so the hub has been through several more loop iterations, each
    // of which would have written the line without the buffer.
    assert!(hub
        .poll_envelope("beta", &await_line(None, None, Some(0)))
        .is_some());
    let before = hub.service_log();
    if started.elapsed()
        < Duration::from_millis(agent_hub_host::config::MAX_SERVICE_LOG_FLUSH_MS / 2)
    {
        assert!(
            !accepted_line(&before),
            "an INFO line was written before its interval passed:\n{before}"
        );
    }
    let status = hub.terminate();
    assert!(status.success(), "{status:?}");
    let log = hub.service_log();
    assert!(accepted_line(&log), "the buffered line was lost:\n{log}");
    let last = log.lines().last().unwrap_or_default();
    assert!(
        last.ends_with(" INFO hub stopped"),
        "last line: {last}\n{log}"
    );
}

/// With a short interval and nothing else happening, the timer alone writes the line: the
/// loop wakes for it instead of sleeping until the next connection.
#[test]
fn the_flush_timer_writes_lines_with_no_other_activity() {
    let hub = Hub::with_limits(|l| l.service_log_flush_ms = 50);
    hub.send("alpha", "beta", "note", None, "{\"n\":2}");
    hub.wait_service_log("the send's line, written by the timer", accepted_line);
}
