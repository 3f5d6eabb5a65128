//! The relay: hubs on different machines link over the relay wire protocol (the whole protocol,
//! v0 and v1, in `docs/relay-protocol.md`; SPEC §13, §15).
//!
//! Layers, bottom up: `auth` (keys, nonces, v0 proofs), `transcript` (v1 proofs and frame
//! keys), `nonces` (the nonces a hub issued, against reflection) and `message` (the envelope,
//! its NDJSON line codec, the typed catalogue) → `frame` (binary frames + LZ4), `framemac`
//! (their MACs), `heartbeat` (the directory, full and delta beats) and `cards` (the `agents`
//! feature's capability list) → `session` (one
//! connection's state machine) → `links` (which connection is a peer's lasting link). Beside
//! them: `json_budget` (what a message may cost once parsed) and `throttle` (the rate limit on
//! log lines a peer triggers), both for docs/relay-protocol.md "Limits". All of it is sans-IO:
//! no sockets, files, clocks, threads or randomness; the server moves the bytes and passes the
//! time in.

pub mod auth;
mod base64;
pub mod cards;
pub mod frame;
pub mod framemac;
pub mod heartbeat;
pub mod json_budget;
pub mod links;
pub mod message;
pub mod nonces;
pub mod session;
pub mod throttle;
pub mod transcript;
pub mod worker;

pub use message::{feature_for, Feature, MsgType, Payload, RelayError, RelayMessage};
pub use session::{
    Dialect, PeerAuth, Role, SendError, Session, SessionConfig, SessionEvent, SessionState,
    WallClock,
};

/// Waits before each redial of a link we dialled (docs/relay-protocol.md §2.5: 10 s, 20 s,
/// 40 s, then every 60 s). `attempt` counts from 0 for the first redial.
pub fn reconnect_delay(attempt: u32) -> std::time::Duration {
    const SECS: [u64; 4] = [10, 20, 40, 60];
    std::time::Duration::from_secs(SECS[(attempt as usize).min(SECS.len() - 1)])
}

#[cfg(test)]
mod tests;
