//! The flags a task's owner and its driver thread share (docs/acp.md "The runner"): the
//! owner's cancel and abandon, the owner's answers to held requests (issue 37), its
//! follow-up prompts and its close of a kept session (issue 38 design §2), the driver's end
//! and the agent's pid. Its own file so that the handle (the owner's side) and both
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
    /// The owner's follow-up prompts (`TaskHandle::prompt`), oldest first.
    pub(super) prompts: Mutex<VecDeque<FollowUp>>,
    /// The owner closes the kept session (`TaskHandle::close`).
    pub(super) close: AtomicBool,
}

/// A follow-up turn for the session (issue 38 design §2). `Debug` shows the text's size only.
pub(super) struct FollowUp {
    /// The book's number for the turn.
    pub(super) turn: u32,
    pub(super) text: String,
    pub(super) interrupt: bool,
}

impl std::fmt::Debug for FollowUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FollowUp")
            .field("turn", &self.turn)
            .field("text_bytes", &self.text.len())
            .field("interrupt", &self.interrupt)
            .finish()
    }
}

/// Follow-ups queued for the driver at most: the book sends one per turn and refuses another
/// while a turn is open, so only an owner gone wrong reaches it.
pub(super) const MAX_QUEUED_PROMPTS: usize = 8;

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

    /// Queues a follow-up; false when the queue is full (or poisoned).
    pub(super) fn push_prompt(&self, follow_up: FollowUp) -> bool {
        let Ok(mut q) = self.prompts.lock() else {
            return false;
        };
        if q.len() >= MAX_QUEUED_PROMPTS {
            return false;
        }
        q.push_back(follow_up);
        true
    }

    /// Every queued follow-up, oldest first.
    pub(super) fn take_prompts(&self) -> Vec<FollowUp> {
        match self.prompts.lock() {
            Ok(mut q) => q.drain(..).collect(),
            Err(_) => Vec::new(),
        }
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

    #[test]
    fn follow_ups_queue_in_order_are_bounded_and_hide_their_text() {
        let c = Control::default();
        let f = |turn| FollowUp {
            turn,
            text: "secret words".into(),
            interrupt: false,
        };
        for t in 0..MAX_QUEUED_PROMPTS as u32 {
            assert!(c.push_prompt(f(t + 2)));
        }
        assert!(!c.push_prompt(f(99)), "full");
        let got = c.take_prompts();
        assert_eq!(got.iter().map(|p| p.turn).collect::<Vec<_>>()[..2], [2, 3]);
        assert!(!format!("{:?}", got[0]).contains("secret"));
        assert!(c.take_prompts().is_empty());
    }
}
