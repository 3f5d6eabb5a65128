//! The end-to-end test binary: the real `agent-hub-server` and `agent-hub` binaries on
//! ephemeral loopback ports, one temp dir per test (`harness.rs`).
//!
//! Owns only the module list. Timing-exact behaviour (deadlines to the millisecond, zero-byte
//! write outcomes) is refused here: the sans-IO simulation in `src/hub/tests/` owns it, and
//! these tests use real time only with generous bounds.

mod harness;
// The scripted agents, built on demand (crates/test-fakes); shared with the small test
// binaries, which reach it as `common::fakes`.
#[path = "../common/fakes.rs"]
mod fakes;

mod audit_chain;
mod bounds;
mod client_cli;
mod delegate;
mod delegate_cli;
mod delegate_headless;
mod delegate_peer;
mod delivery;
mod demo;
mod durable;
mod forgery;
mod leaks;
mod limits;
mod liveness;
mod no_loss;
mod pipelining;
mod receipts;
mod relay;
mod relay_attack;
mod relay_dialect;
mod relay_limits;
mod relay_liveness;
mod relay_one_shot;
mod roster;
mod sandbox;
mod service_log;
mod startup;
mod strangers;
mod top;
mod wire;
