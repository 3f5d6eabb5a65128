//! Fuzz target `relay_line`: the body is in `../bodies.rs` (shared with tests/integration/relay_fixtures.rs).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../bodies.rs"]
mod bodies;

fuzz_target!(|data: &[u8]| bodies::relay_line(data));
