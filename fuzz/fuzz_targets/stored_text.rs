//! Fuzz target `stored_text`: the body is `../drivers/stored_text.rs` (also run over the seed
//! corpus by tests/integration/fuzz_seeds.rs in every `cargo test`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../drivers/mod.rs"]
mod drivers;

fuzz_target!(|data: &[u8]| drivers::stored_text::run(data));
