//! The task identity's rules (docs/delegation.md "Task identity", issue 29): who may log in as
//! `task-…` (its token, compared in constant time), a token pasted as a name, who may mail a
//! task, and whom a task may mail. Refuses IO.

use super::types::TaskId;
use super::TaskBook;

impl TaskBook {
    /// Whether `name`/`token` is a live task identity (from its start to its outcome);
    /// the delegator when it is. The comparison is the roster's constant-time one.
    pub fn verify_identity(&self, name: &str, token: &str) -> Option<&str> {
        let t = self.tasks.get(&TaskId::parse(name)?)?;
        let want = t.token.as_deref()?;
        let same = crate::roster::ct_eq(want.as_bytes(), token.as_bytes());
        same.then_some(t.delegator.as_str())
    }

    /// Whether `text` (a name a failed hello asserted) is a live task identity's token,
    /// pasted in the name field: such a name is never recorded (SPEC §6.2, issue 29). Every
    /// live token is compared, in constant time.
    pub fn holds_token(&self, text: &str) -> bool {
        let given = text.trim().as_bytes();
        self.tasks
            .values()
            .filter_map(|t| t.token.as_deref())
            .fold(false, |found, token| {
                found | crate::roster::ct_eq(token.as_bytes(), given)
            })
    }

    /// Whether `from` may mail the task identity `task` (docs/delegation.md "Task identity"):
    /// the task is one this book holds and has not ended, and `from` is its delegator or a
    /// name in `tasks.may_mail` (the agents a task may mail may answer it). Anyone else could
    /// only pile mail up in a queue no one reads, or feed the task's agent instructions its
    /// delegator never gave.
    pub fn may_receive(&self, task: &str, from: &str) -> bool {
        let Some(t) = TaskId::parse(task).and_then(|id| self.tasks.get(&id)) else {
            return false;
        };
        !t.state.is_final()
            && (t.delegator == from || self.config.may_mail.iter().any(|m| m == from))
    }

    /// Whether `name` is a task this book holds that has not ended: mail queued for its
    /// identity still has a reader to come (SPEC §14 "Mail nobody holds").
    pub fn is_live_task(&self, name: &str) -> bool {
        TaskId::parse(name)
            .and_then(|id| self.tasks.get(&id))
            .is_some_and(|t| !t.state.is_final())
    }

    /// Whether the task identity `name` may send to `to`: its delegator, or a name in
    /// `tasks.may_mail`, and only while it is live.
    pub fn may_mail(&self, name: &str, to: &str) -> bool {
        let Some(t) = TaskId::parse(name).and_then(|id| self.tasks.get(&id)) else {
            return false;
        };
        t.token.is_some() && (t.delegator == to || self.config.may_mail.iter().any(|m| m == to))
    }
}
