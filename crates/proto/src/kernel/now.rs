//! The time, as a value the caller passes in (PLAN.md §1, "sans-IO core"): the pure layers
//! never read a clock. The server reads both clocks once per loop turn and hands the pair
//! down; simulations and fuzz drivers make their own.

use chrono::{DateTime, Utc};
use std::time::Instant;

/// The time, passed in: `mono` drives deadlines; `wall` only stamps what a person or a peer
/// reads (the `ts` of the hub's own envelopes, task records).
#[derive(Debug, Clone, Copy)]
pub struct Now {
    pub mono: Instant,
    pub wall: DateTime<Utc>,
}
