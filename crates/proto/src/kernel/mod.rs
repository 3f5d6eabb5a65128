//! The kernel under everything (issue 30; PLAN.md "The floors"): the vocabulary every layer
//! shares and nothing in it depends on. Time as a value (`now::Now`), the source of the ids
//! the core makes (`ids`), saturating deadlines (`deadline`), the keyed hash for tables whose
//! keys a peer chooses (`fold_hash`), the one rule for each kind of name (`names`), the lease resource rules
//! (`lease_match`) and the one sanitiser for other parties' strings shown to a person (`text`).
//!
//! The rule it keeps: a kernel file imports nothing from the crate outside `kernel`, and does
//! no IO: no socket, file, process, thread, clock read or OS random source (the lints below,
//! clippy.toml). `.ci/run` checks the first half; clippy the second.

pub mod deadline;
pub(crate) mod fold_hash;
pub mod ids;
pub mod lease_match;
pub mod names;
pub mod now;
pub mod text;
