//! Fuzz target `roster_parse`: the body is `../drivers/roster_parse.rs` (also run over the seed corpus by
//! tests/integration/fuzz_seeds.rs in every `cargo test`).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../drivers/mod.rs"]
mod drivers;

fuzz_target!(|data: &[u8]| drivers::roster_parse::run(data));
