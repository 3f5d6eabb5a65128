//! The flags a task's owner and its driver thread share (docs/acp.md "The runner"): the
//! owner's cancel and abandon, the owner's answers to held requests (issue 37), the driver's
//! end and the agent's pid. Its own file so that the handle (the owner's side) and both
//! drivers (ACP, headless) depend on it without depending on each other in a loop.
//!
//! The answers wait in a queue of their own rather than the driver's input channel: that
//! channel is bounded (the stdout reader blocks on it) and the owner, the event loop, must
//! never block, while an answer must never be dropped for a full channel as a poke may be.

use agent_hub_proto::tasks::RequestAnswer;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU32};
use std::sync::Mutex;

/// Answers queued for the driver at most. The book holds at most
/// `tasks.max_open_requests_per_task` (≤ 64) requests of a task open, so only an owner gone
/// wrong reaches it.
pub(super) const MAX_QUEUED_ANSWERS: usize = 1024;

/// Flags the owner sets and the driver reads (and one the driver sets).
#[derive(Debug, Default)]
pub(super) struct Control {
    pub(super) cancel: AtomicBool,
    pub(super) abandoned: AtomicBool,
    pub(super) ended: AtomicBool,
    pub(super) pid: AtomicU32,
    /// The owner's answers (`TaskHandle::answer`), oldest first, for the driver to take.
    pub(super) answers: Mutex<VecDeque<(u32, RequestAnswer)>>,
}

impl Control {
    /// Queues an answer; false when the queue is full (or poisoned).
    pub(super) fn push_answer(&self, seq: u32, answer: RequestAnswer) -> bool {
        let Ok(mut q) = self.answers.lock() else {
            return false;
        };
        if q.len() >= MAX_QUEUED_ANSWERS {
            return false;
        }
        q.push_back((seq, answer));
        true
    }

    /// Every queued answer, oldest first.
    pub(super) fn take_answers(&self) -> Vec<(u32, RequestAnswer)> {
        match self.answers.lock() {
            Ok(mut q) => q.drain(..).collect(),
            Err(_) => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_queue_in_order_and_are_bounded() {
        let c = Control::default();
        let a = |o: &str| RequestAnswer {
            option_id: Some(o.into()),
            message: None,
        };
        assert!(c.push_answer(2, a("x")) && c.push_answer(1, a("y")));
        let got = c.take_answers();
        assert_eq!(got, vec![(2, a("x")), (1, a("y"))]);
        assert!(c.take_answers().is_empty());
        for i in 0..MAX_QUEUED_ANSWERS {
            assert!(c.push_answer(i as u32, a("z")));
        }
        assert!(!c.push_answer(0, a("z")), "full");
        assert_eq!(c.take_answers().len(), MAX_QUEUED_ANSWERS);
        assert!(c.push_answer(0, a("z")), "room again");
    }
}
