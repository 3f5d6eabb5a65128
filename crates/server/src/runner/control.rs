//! The flags a task's owner and its driver thread share (docs/acp.md "The runner"): the
//! owner's cancel and abandon, the driver's end and the agent's pid. Its own file so that the
//! handle (the owner's side) and both drivers (ACP, headless) depend on it without depending on
//! each other in a loop.

use std::sync::atomic::{AtomicBool, AtomicU32};

/// Flags the owner sets and the driver reads (and one the driver sets).
#[derive(Debug, Default)]
pub(super) struct Control {
    pub(super) cancel: AtomicBool,
    pub(super) abandoned: AtomicBool,
    pub(super) ended: AtomicBool,
    pub(super) pid: AtomicU32,
}
