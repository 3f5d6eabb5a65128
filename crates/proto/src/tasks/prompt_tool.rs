//! The task book's side of a headless task's permission prompts (issue 37 design §6;
//! docs/delegation.md "Approvals"): the `task_permission` verb decided as an ACP request is,
//! by the task's policy, its pre-approval rules and, under `ask`, the book's `Approvals`
//! (same id, envelope, caps, audit and expiry as any request, `Source::Prompt`).
//!
//! Owns `TaskBook::ask_permission` (who may ask: only the task's own identity, about its own
//! task, while it runs and asks through the tool), `prompt_gone` (the asker's connection
//! closed) and `poll_prompt_answer` (the replies for the hub's parked connections). Refuses
//! IO, connections (the hub's), and every rule about a request itself (`Approvals`').

use super::approvals::{Approvals, Source};
use super::prompts::{PromptAnswer, PromptRefusal};
use super::types::{TaskId, TaskState};
use super::{TaskAction, TaskBook, TaskCommit};
use crate::acp::permission::AllowRule;
use crate::acp::sanitize::Secrets;
use crate::acp::PermissionPolicy;
use crate::kernel::ids::IdSource;
use crate::kernel::now::Now;
use crate::wire::approval::{TaskPermissionReply, TaskPermissionRequest};

impl TaskBook {
    /// `task_permission` from `asker` (design §6): refused, or taken as prompt `seq` of the
    /// asker's task, whose one reply comes out of `poll_prompt_answer` under `(task, seq)`,
    /// at once (the policy, a rule, a cap) or when the request is decided. The caller parks
    /// the connection under that key before it drains the book.
    pub fn ask_permission(
        &mut self,
        asker: &str,
        req: &TaskPermissionRequest,
        now: Now,
        ids: &mut dyn IdSource,
    ) -> Result<u32, PromptRefusal> {
        // The asker is the task: a verb names no task, so no one can ask about another's.
        let Some(id) = TaskId::parse(asker) else {
            return Err(PromptRefusal::NotATask);
        };
        let Some(t) = self.tasks.get(&id) else {
            return Err(PromptRefusal::NotRunning {
                task: id.as_str().to_owned(),
            });
        };
        if t.state != TaskState::Running || t.peer.is_some() {
            return Err(PromptRefusal::NotRunning {
                task: id.as_str().to_owned(),
            });
        }
        let secrets = Secrets::new(t.token.clone());
        let max_input = self.approvals.settings().max_request_bytes;
        let prompt = self.prompts.read(&id, req, max_input, &secrets)?;
        let seq = prompt.ask.seq;
        // The policy the executor gave the task: the narrower of the delegation's and the
        // operator's bound in force (design §1).
        let bound = self.config.bound_for(&t.agent);
        let policy = t.permission.map_or(bound, |asked| asked.min(bound));
        let what = format!(
            "task {id}: permission prompt {seq} for tool {}",
            crate::kernel::text::for_terminal(&req.tool_name)
        );
        match policy {
            PermissionPolicy::Reject => {
                self.log(format!("{what}: denied (policy reject)"));
                self.prompts.decide(
                    &id,
                    seq,
                    TaskPermissionReply::deny("denied: this task runs under permission reject"),
                );
            }
            PermissionPolicy::Allow => {
                self.log(format!("{what}: allowed (policy allow)"));
                self.prompts.decide(&id, seq, TaskPermissionReply::allow());
            }
            PermissionPolicy::Ask => {
                let cwd = t.cwd.display().to_string();
                let rule = t.allow.iter().position(|r| {
                    AllowRule::new(&r.kinds, r.under.as_deref())
                        .is_ok_and(|rule| rule.matches(&cwd, &prompt.facts))
                });
                let cap = self.approvals.settings().max_open_requests_per_task as usize;
                if let Some(rule) = rule {
                    self.log(format!(
                        "{what}: allowed (pre-approved by allow rule {})",
                        rule + 1
                    ));
                    let c = Approvals::preapproved(&id, &prompt.ask, rule);
                    self.actions.push_back(TaskAction::Commit(c));
                    self.prompts.decide(&id, seq, TaskPermissionReply::allow());
                } else if self.prompts.open_count(&id) > cap {
                    // This one counts among the open: more than the cap is past it, as the
                    // session's own cap (design §4.1).
                    self.log(format!(
                        "{what}: not held (max_open_requests_per_task = {cap}): denied"
                    ));
                    self.actions.push_back(TaskAction::Commit(TaskCommit {
                        audit: vec![super::TaskAudit::RequestRefused {
                            task: id.as_str().to_owned(),
                            why: "max_open_requests_per_task".to_owned(),
                        }],
                        ..TaskCommit::default()
                    }));
                    self.prompts.decide(
                        &id,
                        seq,
                        TaskPermissionReply::deny(format!(
                            "denied: this task holds {cap} open requests already, the most it may (tasks.max_open_requests_per_task)"
                        )),
                    );
                } else {
                    self.open_request(&id, prompt.ask, Source::Prompt, now, ids);
                }
            }
        }
        Ok(seq)
    }

    /// The connection that asked prompt `seq` of `task` closed before its reply: the request
    /// it is held as closes `cancelled` (its commit queued), and a later answer is refused as
    /// for a cancelled request.
    pub fn prompt_gone(&mut self, task: &str, seq: u32) {
        let Some(id) = TaskId::parse(task) else {
            return;
        };
        let Some(request) = self.prompts.gone(&id, seq) else {
            return;
        };
        if let Some((op, record)) = self.approvals.close_one(&request) {
            self.log(format!(
                "task {id}: permission prompt {seq} closed: its asker went away ({request} closed)"
            ));
            self.actions.push_back(TaskAction::Commit(TaskCommit {
                store: vec![op],
                envelope: None,
                audit: vec![record],
            }));
        }
    }

    /// The next reply for a parked permission prompt, oldest first.
    pub fn poll_prompt_answer(&mut self) -> Option<PromptAnswer> {
        self.prompts.poll_answer()
    }

    fn log(&mut self, line: String) {
        self.actions.push_back(TaskAction::Log(line));
    }
}
