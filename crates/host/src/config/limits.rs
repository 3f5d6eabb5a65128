//! Loading the `[limits]` table (SPEC §7; docs/operations.md "Limits"): the upper bound of each
//! value, the startup check against it, and the table written back as TOML.
//!
//! The `Limits` type itself is the core's (`hub::limits`, PLAN.md §14 "The floors"); it is
//! re-exported here so `crate::config::Limits` resolves as before. Refuses: a zero or
//! out-of-bounds value.

use super::bounds::{
    check, check_bytes, check_count, check_duration_ms, check_duration_secs, Unit,
    MAX_ACK_TIMEOUT_MS, MAX_CLIENT_TIMEOUT_MS, MAX_CONNECTIONS, MAX_IDEMPOTENCY_IDS,
    MAX_IDEMPOTENCY_WINDOW_SECS, MAX_LINE_BYTES, MAX_QUEUE_BYTES, MAX_QUEUE_ENVELOPES,
};
use super::ConfigError;
pub use agent_hub_proto::hub::limits::{
    Limits, DEFAULT_ANSWER_LINGER_MS, DEFAULT_CONNECTION_SHARE_DIVISOR,
    DEFAULT_IDEMPOTENCY_MAX_BYTES, DEFAULT_MAX_DELIVERIES, DEFAULT_MAX_STATUS_WAITS,
    DEFAULT_SERVICE_LOG_FLUSH_MS, DEFAULT_STORE_BACKLOG_MAX_BYTES,
};

/// `limits.idempotency_max_bytes`'s accepted range: below 1 MiB a few thousand ids would crowd each other out; past
/// 1 TiB it bounds nothing (the queues' own bound, `limits.hub_max_bytes`).
pub const IDEMPOTENCY_BYTES_RANGE: std::ops::RangeInclusive<u64> = 1 << 20..=1 << 40;
/// `limits.store_backlog_max_bytes`'s accepted range: a backlog below 64 KiB would refuse sends after a handful of
/// deliveries; one past 1 GiB is no bound on a hub's memory.
pub const STORE_BACKLOG_BYTES_RANGE: std::ops::RangeInclusive<usize> = 64 * 1024..=1 << 30;
/// The largest `limits.max_deliveries` accepted: past this a poison envelope would occupy
/// readers for days at the ack deadline, which is no cap at all.
pub const MAX_MAX_DELIVERIES: u32 = 10_000;
/// `limits.service_log_flush_ms`'s upper bound: a longer wait would leave the log behind what the hub is doing and put
/// more at risk on a SIGKILL.
pub const MAX_SERVICE_LOG_FLUSH_MS: u64 = 10_000;

/// The `[limits]` table as config text (tests and tools that write configs).
pub fn to_toml(limits: &Limits) -> String {
    // Invariant: a struct of integers always serialises to TOML.
    format!(
        "[limits]\n{}",
        toml::to_string(limits).expect("integers serialise")
    )
}

/// Every limit is positive and within its upper bound (`bounds`).
pub(super) fn validate(limits: &Limits) -> Result<(), ConfigError> {
    let n = |v: usize| v as u64;
    check_bytes(
        "limits.max_line_bytes",
        n(limits.max_line_bytes),
        MAX_LINE_BYTES,
    )?;
    check_count(
        "limits.max_connections",
        n(limits.max_connections),
        MAX_CONNECTIONS,
    )?;
    for (key, v) in [
        ("limits.hello_timeout_ms", limits.hello_timeout_ms),
        ("limits.verb_timeout_ms", limits.verb_timeout_ms),
        ("limits.write_timeout_ms", limits.write_timeout_ms),
    ] {
        check_duration_ms(key, v, MAX_CLIENT_TIMEOUT_MS)?;
    }
    check_count(
        "limits.queue_max_envelopes",
        n(limits.queue_max_envelopes),
        MAX_QUEUE_ENVELOPES,
    )?;
    check_bytes(
        "limits.queue_max_bytes",
        n(limits.queue_max_bytes),
        MAX_QUEUE_BYTES,
    )?;
    check_bytes(
        "limits.hub_max_bytes",
        n(limits.hub_max_bytes),
        MAX_QUEUE_BYTES,
    )?;
    check_duration_ms(
        "limits.ack_timeout_ms",
        limits.ack_timeout_ms,
        MAX_ACK_TIMEOUT_MS,
    )?;
    check_duration_secs(
        "limits.idempotency_window_secs",
        limits.idempotency_window_secs,
        MAX_IDEMPOTENCY_WINDOW_SECS,
    )?;
    check_count(
        "limits.idempotency_max_ids",
        n(limits.idempotency_max_ids),
        MAX_IDEMPOTENCY_IDS,
    )?;
    check(
        "limits.idempotency_max_bytes",
        n(limits.idempotency_max_bytes),
        *IDEMPOTENCY_BYTES_RANGE.start(),
        *IDEMPOTENCY_BYTES_RANGE.end(),
        Unit::Bytes,
    )?;
    // 0 is allowed: the hub ends an answered connection right after its reply.
    check(
        "limits.answer_linger_ms",
        limits.answer_linger_ms,
        0,
        MAX_CLIENT_TIMEOUT_MS,
        Unit::Millis,
    )?;
    // Each parked wait holds a connection: the connection cap's bound is this one's.
    check_count(
        "limits.max_status_waits",
        n(limits.max_status_waits),
        MAX_CONNECTIONS,
    )?;
    // 0 is allowed: every loop iteration writes its lines.
    check(
        "limits.service_log_flush_ms",
        limits.service_log_flush_ms,
        0,
        MAX_SERVICE_LOG_FLUSH_MS,
        Unit::Millis,
    )?;
    // Shares of the connection cap: at most all of it (a config that lets strangers, or
    // one agent, hold every slot says so explicitly, e.g. with max_connections = 1).
    for (key, v) in [
        ("limits.max_unauthenticated", limits.max_unauthenticated),
        (
            "limits.max_connections_per_agent",
            limits.max_connections_per_agent,
        ),
    ] {
        if let Some(v) = v {
            check_count(key, n(v), MAX_CONNECTIONS)?;
            if v > limits.max_connections {
                return Err(ConfigError::Invalid(format!(
                    "{key} = {v} is above limits.max_connections ({})",
                    limits.max_connections
                )));
            }
        }
    }
    if !(1..=MAX_MAX_DELIVERIES).contains(&limits.max_deliveries) {
        return Err(ConfigError::Invalid(format!(
            "limits.max_deliveries must be between 1 and {MAX_MAX_DELIVERIES}"
        )));
    }
    if !STORE_BACKLOG_BYTES_RANGE.contains(&limits.store_backlog_max_bytes) {
        return Err(ConfigError::Invalid(format!(
            "limits.store_backlog_max_bytes must be between {} and {}",
            STORE_BACKLOG_BYTES_RANGE.start(),
            STORE_BACKLOG_BYTES_RANGE.end()
        )));
    }
    Ok(())
}
