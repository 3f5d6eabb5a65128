//! One file per verb (SPEC §4.3, §5, §12, §14), each an `impl Hub` block with that verb's
//! handlers and the helpers only it uses. The connection protocol that dispatches to them
//! is `hub::session`; what they share (replies, routing, the commit) lives beside it.

mod ack;
mod activity;
mod await_;
mod delegate;
mod send;
pub(super) mod status;
mod turn;
mod who;
