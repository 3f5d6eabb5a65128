//! The hub's limits as plain data (SPEC §7 `[limits]`; docs/operations.md "Limits"): the caps on
//! lines, connections, queues, deadlines and the idempotency window that the core enforces.
//!
//! Owns the `Limits` struct, the defaults of its optional keys and the accessors the core reads.
//! Reading it from TOML and checking each value against its bound is the config loader's work
//! (`config::limits`), which stands above the core (PLAN.md §14 "The floors"): the core only
//! ever sees limits that were already validated.

use serde::Deserialize;
use std::time::Duration;

/// The hub's limits. Every one is explicit in the config file; `config.example.toml` carries
/// the recommended values.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Longest accepted line, not counting its `\n`.
    pub max_line_bytes: usize,
    /// Open client connections at once; beyond it a connection gets an error line and is closed.
    pub max_connections: usize,
    /// Deadline for the hello line, from accept.
    pub hello_timeout_ms: u64,
    /// Deadline for the verb line, from the `ok` line.
    pub verb_timeout_ms: u64,
    /// Deadline for a reply or delivery to be taken in full by the peer's socket.
    pub write_timeout_ms: u64,
    /// Envelopes queued for one agent at most.
    pub queue_max_envelopes: usize,
    /// Bytes of envelope text queued for one agent at most.
    pub queue_max_bytes: usize,
    /// Bytes of envelope text queued across all agents at most.
    pub hub_max_bytes: usize,
    /// How long an ack-mode reader has to ack a delivery before it is given to another.
    pub ack_timeout_ms: u64,
    /// How long accepted ids are remembered for idempotent resends and status queries after
    /// the envelope settled (delivered, acked or bounced).
    pub idempotency_window_secs: u64,
    /// Remembered ids at most; past it the oldest settled ones are forgotten early.
    pub idempotency_max_ids: usize,
    /// How many times one envelope may reach a reader in ack mode and come back without an
    /// ack; the delivery that reaches it bounces the envelope instead (SPEC §12.2). Optional:
    /// configs written before it keep loading.
    #[serde(default = "default_max_deliveries")]
    pub max_deliveries: u32,
    /// How many bytes of changes that gate no reply (removals, attempt counts, states,
    /// forgotten ids) a failing queue store may leave waiting before sends are refused until
    /// a commit succeeds (SPEC §12.1). Optional, like `max_deliveries`.
    #[serde(default = "default_store_backlog_max_bytes")]
    pub store_backlog_max_bytes: usize,
    /// How long an answered connection stays open for a line the client wrote before it read
    /// the reply, before the hub ends its side (SPEC §4.3). 0 ends it right after the reply.
    /// Optional, like `max_deliveries`.
    #[serde(default = "default_answer_linger_ms")]
    pub answer_linger_ms: u64,
    /// How many `status` requests with `waitFor` may be parked at once (SPEC §12.4
    /// "Waiting for a stage"); one past it is refused with an error line. Optional, like
    /// `max_deliveries`.
    #[serde(default = "default_max_status_waits")]
    pub max_status_waits: usize,
    /// How long an INFO line of the service log may wait in the hub's buffer before it is
    /// written (docs/operations.md, "Service log"): one append per interval instead of one per
    /// loop iteration. WARN and ERROR lines are written at the end of their iteration, and
    /// every stop (SIGTERM, SIGINT) writes what is buffered; a SIGKILL loses at most this
    /// much of INFO lines. 0 writes at the end of every iteration. The audit log's `.head`
    /// file is rewritten on the same interval and at every stop (`Records::record_head_due`).
    /// Optional, like `max_deliveries`.
    #[serde(default = "default_service_log_flush_ms")]
    pub service_log_flush_ms: u64,
    /// How many connections may be open at once that have not authenticated: waiting for
    /// their hello, or closing after a failed one (SPEC §4.6). Past it, and when
    /// `max_connections` is reached, a new connection takes the place of the oldest of them,
    /// so strangers never hold a slot an agent needs. Optional; absent, a quarter of
    /// `max_connections` (`max_unauthenticated()`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unauthenticated: Option<usize>,
    /// How many connections one authenticated name may hold at once; a hello past it is
    /// refused (SPEC §4.6), so one identity cannot take every slot. Optional; absent, a
    /// quarter of `max_connections` (`max_connections_per_agent()`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_connections_per_agent: Option<usize>,
    /// What the remembered ids may take of the hub's memory, as the ledger charges them
    /// (`hub::ledger::RECORD_BYTES` per id plus its id and names); past it the earliest
    /// settled ids are forgotten early, as past `idempotency_max_ids` (SPEC §12.3). Optional,
    /// like `max_deliveries`.
    #[serde(default = "default_idempotency_max_bytes")]
    pub idempotency_max_bytes: usize,
}

/// `limits.idempotency_max_bytes` when the config says nothing (256 MiB): a million ids as
/// `agent-hub` makes them (UUIDs, charged about 200 bytes each) fit, so the default
/// `idempotency_max_ids` binds first for them; half a million of the longest ids and names
/// the caps allow (128-byte ids, 256-byte names) fit too.
pub const DEFAULT_IDEMPOTENCY_MAX_BYTES: usize = 256 * 1024 * 1024;

fn default_idempotency_max_bytes() -> usize {
    DEFAULT_IDEMPOTENCY_MAX_BYTES
}

/// `limits.max_unauthenticated` and `limits.max_connections_per_agent` when the config says
/// nothing: this share of `max_connections` (at least 1). With the example's 1024, 256 each:
/// strangers and the greediest agent together hold at most half the slots, and 256 is far
/// more than a real agent holds (a watcher, an `await --reply-to` per outstanding dispatch,
/// its sends, its MCP server's calls: tens), while a burst of 256 connections whose hellos
/// are still in flight does not push one of them out.
pub const DEFAULT_CONNECTION_SHARE_DIVISOR: usize = 4;

/// `limits.service_log_flush_ms` when the config says nothing: well under what an operator
/// tailing the log notices, and at connection-per-op rates one append per hundreds of lines.
pub const DEFAULT_SERVICE_LOG_FLUSH_MS: u64 = 100;

fn default_service_log_flush_ms() -> u64 {
    DEFAULT_SERVICE_LOG_FLUSH_MS
}

/// `limits.max_status_waits` when the config says nothing: as many as the example's
/// connection cap, so a hub with the recommended limits never refuses a wait before its
/// connection cap refuses the connection.
pub const DEFAULT_MAX_STATUS_WAITS: usize = 1024;

fn default_max_status_waits() -> usize {
    DEFAULT_MAX_STATUS_WAITS
}

/// `limits.answer_linger_ms` when the config says nothing: none. The connection ends at its
/// reply, as the 004 implementation's does (SPEC §4.3, issue 29): a client that reads until
/// the hub closes (`nc`, a script's read-all) sees the end right after the reply instead of
/// waiting out a linger per verb. A line already in when the reply goes out is still
/// answered `a line after the verb: …`; a positive value keeps reading that long for lines
/// written later (the behaviour before issue 29, with 500).
pub const DEFAULT_ANSWER_LINGER_MS: u64 = 0;

fn default_answer_linger_ms() -> u64 {
    DEFAULT_ANSWER_LINGER_MS
}

/// `limits.store_backlog_max_bytes` when the config says nothing (16 MiB, the bound the audit
/// log's held records have).
pub const DEFAULT_STORE_BACKLOG_MAX_BYTES: usize = 16 * 1024 * 1024;

fn default_store_backlog_max_bytes() -> usize {
    DEFAULT_STORE_BACKLOG_MAX_BYTES
}

/// `limits.max_deliveries` when the config says nothing.
pub const DEFAULT_MAX_DELIVERIES: u32 = 10;

fn default_max_deliveries() -> u32 {
    DEFAULT_MAX_DELIVERIES
}

impl Limits {
    pub fn hello_timeout(&self) -> Duration {
        Duration::from_millis(self.hello_timeout_ms)
    }
    pub fn verb_timeout(&self) -> Duration {
        Duration::from_millis(self.verb_timeout_ms)
    }
    pub fn write_timeout(&self) -> Duration {
        Duration::from_millis(self.write_timeout_ms)
    }
    pub fn ack_timeout(&self) -> Duration {
        Duration::from_millis(self.ack_timeout_ms)
    }
    pub fn answer_linger(&self) -> Duration {
        Duration::from_millis(self.answer_linger_ms)
    }
    pub fn service_log_flush(&self) -> Duration {
        Duration::from_millis(self.service_log_flush_ms)
    }

    /// `max_connections / DEFAULT_CONNECTION_SHARE_DIVISOR`, at least 1.
    fn default_share(&self) -> usize {
        (self.max_connections / DEFAULT_CONNECTION_SHARE_DIVISOR).max(1)
    }

    /// The cap on connections that have not authenticated (`max_unauthenticated`, or its
    /// default); never above `max_connections` (`config::limits::validate`).
    pub fn max_unauthenticated(&self) -> usize {
        self.max_unauthenticated
            .unwrap_or_else(|| self.default_share())
    }

    /// The cap on connections one authenticated name holds (`max_connections_per_agent`, or
    /// its default); never above `max_connections` (`config::limits::validate`).
    pub fn max_connections_per_agent(&self) -> usize {
        self.max_connections_per_agent
            .unwrap_or_else(|| self.default_share())
    }

    /// The limits of `config.example.toml`, for tests and the demo.
    pub fn example() -> Limits {
        Limits {
            max_line_bytes: 1_048_576,
            max_connections: 1024,
            hello_timeout_ms: 10_000,
            verb_timeout_ms: 10_000,
            write_timeout_ms: 30_000,
            queue_max_envelopes: 10_000,
            queue_max_bytes: 64 * 1024 * 1024,
            hub_max_bytes: 1024 * 1024 * 1024,
            ack_timeout_ms: 30_000,
            idempotency_window_secs: 86_400,
            idempotency_max_ids: 1_000_000,
            max_deliveries: DEFAULT_MAX_DELIVERIES,
            store_backlog_max_bytes: DEFAULT_STORE_BACKLOG_MAX_BYTES,
            answer_linger_ms: DEFAULT_ANSWER_LINGER_MS,
            max_status_waits: DEFAULT_MAX_STATUS_WAITS,
            service_log_flush_ms: DEFAULT_SERVICE_LOG_FLUSH_MS,
            max_unauthenticated: None,
            max_connections_per_agent: None,
            idempotency_max_bytes: DEFAULT_IDEMPOTENCY_MAX_BYTES,
        }
    }
}
