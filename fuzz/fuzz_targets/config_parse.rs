//! Fuzz target `config_parse`: the body is `../drivers/config_parse.rs` (also run over the seed corpus by
//! tests/integration/fuzz_seeds.rs in every `cargo test`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../drivers/mod.rs"]
mod drivers;

fuzz_target!(|data: &[u8]| drivers::config_parse::run(data));
