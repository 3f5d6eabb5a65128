//! The core's outbox: the `Output`s every room of the hub emits, in the order they are
//! emitted, until the IO layer drains them with `Hub::poll_output` (SPEC §4–§5; PLAN.md §1,
//! "One iteration": persist, audit, replies and closes are applied in this order).
//!
//! Owns the queue and the push helpers the verbs and machines use (`audit`, `log`,
//! `log_error`). Refuses deciding anything: what goes in is decided by whoever pushes it, and
//! the order of pushes is the order of outputs. A leaf: it knows only `event`.

use super::event::{AuditEvent, Output};
use std::collections::VecDeque;

/// The outputs not yet drained, oldest first.
#[derive(Debug, Default)]
pub(super) struct Outbox {
    queue: VecDeque<Output>,
}

impl Outbox {
    pub(super) fn push(&mut self, output: Output) {
        self.queue.push_back(output);
    }

    /// An audit record that depends on nothing (written with the next batch).
    pub(super) fn audit(&mut self, event: AuditEvent) {
        self.queue.push_back(Output::Audit(event));
    }

    /// A service-log line.
    pub(super) fn log(&mut self, line: String) {
        self.queue.push_back(Output::Log(line));
    }

    /// A service-log line at level ERROR.
    pub(super) fn log_error(&mut self, line: String) {
        self.queue.push_back(Output::LogError(line));
    }

    /// The oldest output not yet drained.
    pub(super) fn pop(&mut self) -> Option<Output> {
        self.queue.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever helper pushed them, outputs come out in the order they went in.
    #[test]
    fn outputs_leave_in_the_order_they_were_pushed() {
        let mut out = Outbox::default();
        out.log("one".into());
        out.audit(AuditEvent::Connected { conn: 7 });
        out.push(Output::Answered { conn: 7 });
        out.log_error("two".into());
        assert_eq!(out.pop(), Some(Output::Log("one".into())));
        assert_eq!(
            out.pop(),
            Some(Output::Audit(AuditEvent::Connected { conn: 7 }))
        );
        assert_eq!(out.pop(), Some(Output::Answered { conn: 7 }));
        assert_eq!(out.pop(), Some(Output::LogError("two".into())));
        assert_eq!(out.pop(), None);
    }
}
