//! Fuzz target `client_line`: the body is `../drivers/client_line.rs` (also run over the seed
//! corpus by tests/integration/fuzz_seeds.rs in every `cargo test`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../drivers/mod.rs"]
mod drivers;

fuzz_target!(|data: &[u8]| drivers::client_line::run(data));
