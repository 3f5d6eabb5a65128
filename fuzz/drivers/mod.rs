//! The fuzz targets that drive a state machine or a parser of the hub (docs/fuzzing.md). Each
//! target's body is a plain `fn(&[u8])` here: `fuzz_targets/<name>.rs` wraps it for cargo-fuzz,
//! and `tests/integration/fuzz_seeds.rs` runs it over the committed seed corpus (`fuzz/seeds/<name>/`) in
//! every `cargo test`, so the bodies always compile and hold on stable. The two relay decoder
//! bodies (`frame_decoder`, `relay_line`) live in `../bodies.rs`, which predates this module.
//!
//! Every body must never panic on any input; where a panic is raised here, it names an
//! invariant of the library that the input broke. Each module also writes its own seeds
//! (`seeds()`), so the byte encoding of a structured input lives in one place.

// Each fuzz binary uses one driver; the rest is dead code there.
#![allow(dead_code)]

pub mod client_line;
pub mod config_parse;
pub mod cursor;
pub mod hook_input;
pub mod hub_session;
pub mod mcp_session;
pub mod relay_session;
pub mod roster_parse;
pub mod stored_text;

/// A target's body.
pub type Body = fn(&[u8]);
/// Named inputs (seeds).
pub type Seeds = Vec<(String, Vec<u8>)>;

/// Every target in this module: its name (the cargo-fuzz bin, and the seed directory) and its
/// body.
pub const TARGETS: [(&str, Body); 8] = [
    ("relay_session", relay_session::run),
    ("hub_session", hub_session::run),
    ("config_parse", config_parse::run),
    ("roster_parse", roster_parse::run),
    ("mcp_session", mcp_session::run),
    ("hook_input", hook_input::run),
    ("client_line", client_line::run),
    ("stored_text", stored_text::run),
];

/// True if `needle` occurs in `haystack` (for the checks that a secret never reaches a log:
/// they only hold when the input did not carry the secret itself).
pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}
