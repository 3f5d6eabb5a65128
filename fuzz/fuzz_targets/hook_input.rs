//! Fuzz target `hook_input`: the body is `../drivers/hook_input.rs` (also run over the seed corpus by
//! tests/integration/fuzz_seeds.rs in every `cargo test`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../drivers/mod.rs"]
mod drivers;

fuzz_target!(|data: &[u8]| drivers::hook_input::run(data));
