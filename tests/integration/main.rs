//! The one test binary outside src/ (`autotests = false` in Cargo.toml): the real
//! `agent-hub-server` and `agent-hub` binaries on ephemeral loopback ports, one temp dir per
//! test (`harness.rs`, and `common/` for the lighter helpers and the scripted agents of
//! crates/test-fakes), the fixtures of `protocol/` replayed, and the fuzz targets' bodies run
//! over their seeds (`fuzz_seeds`). `relay_fixtures` installs this binary's global allocator:
//! it passes every allocation to the system's and notes, per thread, the largest one, which
//! costs the other tests nothing they measure.
//!
//! Owns only the module list. Timing-exact behaviour (deadlines to the millisecond, zero-byte
//! write outcomes) is refused here: the sans-IO simulation in `crates/proto/src/hub/tests/` owns it, and
//! these tests use real time only with generous bounds.

mod common;
mod harness;

mod acp_requests;
mod acp_runner;
mod acp_session;
mod agents;
mod approvals;
mod approvals_client;
mod approvals_peer;
mod audit_chain;
mod bounds;
mod client_cli;
mod client_errors;
mod delegate;
mod delegate_cli;
mod delegate_headless;
mod delegate_peer;
mod delegate_requests;
mod deliver;
mod delivery;
mod demo;
mod durable;
mod fake_acp_stamps;
mod followups;
mod forgery;
mod fuzz_seeds;
mod headless_prompts;
mod leaks;
mod leases;
mod limits;
mod liveness;
mod manifests_reload;
mod mcp;
mod no_loss;
mod pipelining;
mod placement;
mod protocol_fixtures;
mod questions;
mod readme;
mod receipts;
mod relay;
mod relay_attack;
mod relay_auth_vectors;
mod relay_dialect;
mod relay_fixtures;
mod relay_limits;
mod relay_liveness;
mod relay_one_shot;
mod relay_setup;
mod roster;
mod sandbox;
mod service_log;
mod startup;
mod strangers;
mod top;
mod usage;
mod wire;
