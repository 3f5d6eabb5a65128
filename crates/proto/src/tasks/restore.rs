//! The task book across a restart and at shutdown (docs/delegation.md "Durability"):
//! rebuilding it from the store's rows (queued tasks stay queued in order, running ones end
//! `hub_restarted` exactly once, settled ones are the history) and stopping it. Refuses IO.

use super::meter::{Budget, Meter, Metered};
use super::peer::{Origin, CANCEL_GRACE};
use super::records::{StoredRequest, StoredTask};
use super::types::{TaskId, TaskState};
use super::{ms_between, Ending, Task, TaskAction, TaskBook, TaskCommit};
use crate::kernel::ids::IdSource;
use crate::kernel::now::Now;
use std::path::PathBuf;
use std::time::Duration;

impl TaskBook {
    /// Rebuilds the book from the store's rows at startup: queued tasks stay queued in
    /// acceptance order; the requests still open when the hub stopped close by the fallback,
    /// reason `hub restarted`, each with its `expired` envelope (issue 37 design §4.6); then
    /// running and cancelling tasks end `hub_restarted`; settled ones are the history. These
    /// commits are the first actions. Then `start_ready` is up to the caller.
    pub fn restore(
        &mut self,
        mut rows: Vec<StoredTask>,
        requests: Vec<StoredRequest>,
        now: Now,
        ids: &mut dyn IdSource,
    ) {
        rows.sort_by_key(|r| r.seq);
        let mut history: Vec<(i64, u64, TaskId)> = Vec::new();
        let mut restarted = Vec::new();
        for r in rows {
            let Some(id) = TaskId::parse(&r.task) else {
                self.actions.push_back(TaskAction::Log(format!(
                    "stored task row {} has no valid task id; ignored",
                    r.seq
                )));
                continue;
            };
            self.next_seq = self.next_seq.max(r.seq + 1);
            let state = TaskState::parse(&r.state);
            let approvals = stored_approvals(&id, r.permission.as_deref(), r.allow.as_deref());
            if let Some(line) = approvals.note {
                self.actions.push_back(TaskAction::Log(line));
            }
            let (metered, notes) = stored_metered(r.meter.as_deref(), r.budget.as_deref());
            for why in notes {
                self.actions
                    .push_back(TaskAction::Log(format!("task {id}: {why}; not shown")));
            }
            let t = Task {
                seq: r.seq,
                id: id.clone(),
                delegator: r.delegator,
                agent: r.agent,
                peer: r.peer,
                cwd: PathBuf::from(r.cwd),
                prompt: r.prompt,
                timeout_secs: r.timeout_secs,
                progress_secs: r.progress_secs,
                state: state.unwrap_or(TaskState::Running),
                created_ms: r.created_ms,
                started_ms: r.started_ms,
                ended_ms: r.ended_ms,
                elapsed_ms: r.elapsed_ms,
                stop_reason: r.stop_reason,
                reason: r.reason,
                pid: r.pid,
                token: None,
                holds_slot: false,
                progress: None,
                progress_elapsed_ms: 0,
                sent: None,
                sent_at: None,
                sent_envelope: None,
                held_until: None,
                origin: None,
                confirmed: false,
                needs_send: true,
                peer_timer: None,
                stopped_by_peer: false,
                permission: approvals.permission,
                allow: approvals.allow,
                cancel_reason: None,
                // Placement is not stored (issue 38: no schema change).
                placement: None,
                metered,
            };
            let mut t = t;
            t.origin = Origin::parse(&t.delegator);
            match state {
                Some(TaskState::Queued) if t.peer.is_some() => {
                    let left = (t.created_ms + (t.timeout_secs as i64) * 1000)
                        .saturating_sub(now.wall.timestamp_millis())
                        .max(0);
                    t.peer_timer = Some(crate::kernel::deadline::after(
                        now.mono,
                        Duration::from_millis(left as u64),
                    ));
                    self.peer_waiting.push_back(id.clone());
                }
                Some(TaskState::Queued) => {
                    // `keepSecs` is not stored (schema 5): a restored task keeps the hub's
                    // window (issue 38 design §8 stores it later).
                    let keep = self.turns.keep_for(None).unwrap_or(0);
                    self.turns.register(&id, keep);
                    self.queue.push_back(id.clone());
                }
                // A task running on a peer runs on: the peer is told again once linked (it
                // ignores a task it already has) and its handoff settles it; the timeout
                // counts from its start (docs/delegation.md "Across hubs").
                Some(TaskState::Running) if t.peer.is_some() => {
                    let started = t.started_ms.unwrap_or(t.created_ms);
                    let left = (started + (t.timeout_secs as i64) * 1000)
                        .saturating_sub(now.wall.timestamp_millis())
                        .max(0);
                    t.peer_timer = Some(crate::kernel::deadline::after(
                        now.mono,
                        Duration::from_millis(left as u64),
                    ));
                }
                // Cancelling on a peer: its handoff or the cancel grace settles it.
                Some(TaskState::Cancelling) if t.peer.is_some() => {
                    t.peer_timer = Some(crate::kernel::deadline::after(now.mono, CANCEL_GRACE));
                    t.needs_send = false;
                }
                Some(s) if s.is_final() => {
                    history.push((t.ended_ms.unwrap_or(t.created_ms), t.seq, id.clone()))
                }
                // Running, cancelling, or a state this binary does not know.
                _ => restarted.push(id.clone()),
            }
            self.tasks.insert(id, t);
        }
        history.sort();
        self.settled = history.into_iter().map(|(_, _, id)| id).collect();
        let delegators: std::collections::BTreeMap<TaskId, String> = requests
            .iter()
            .filter_map(|r| TaskId::parse(&r.task))
            .filter_map(|t| self.local_delegator(&t).map(|d| (t, d)))
            .collect();
        let delegator_of = |t: &TaskId| delegators.get(t).cloned();
        let closes = self.approvals.restore(requests, &delegator_of, now, ids);
        for c in closes {
            self.actions.push_back(TaskAction::Commit(c));
        }
        for id in restarted {
            let elapsed = self
                .tasks
                .get(&id)
                .and_then(|t| t.started_ms)
                .map_or(0, |s| ms_between(s, now.wall.timestamp_millis()));
            let why = "the hub restarted while the task was running; its process group was ended"
                .to_owned();
            self.settle(
                &id,
                Ending::bare(TaskState::HubRestarted, why, elapsed),
                now,
                ids,
            );
        }
        // A smaller history_max than before takes effect now.
        let mut store = Vec::new();
        let mut audit = Vec::new();
        self.prune_history(&mut store, &mut audit);
        if !store.is_empty() {
            self.actions.push_back(TaskAction::Commit(TaskCommit {
                store,
                envelope: None,
                audit,
            }));
        }
    }

    /// The hub is stopping: no task starts any more, and every running task is asked to
    /// cancel (its outcome, if it comes before the drain deadline, settles it; one still
    /// running at exit stays `running` in the store and is reported `hub_restarted` at the
    /// next start). Queued tasks stay queued, in the store too. Tasks running on a peer are
    /// left running there: their handoff settles them after the restart.
    pub fn shutdown(&mut self) {
        self.shutting_down = true;
        let running: Vec<TaskId> = self
            .tasks
            .values()
            .filter(|t| t.state == TaskState::Running && t.peer.is_none())
            .map(|t| t.id.clone())
            .collect();
        for id in running {
            if let Some(t) = self.tasks.get_mut(&id) {
                t.state = TaskState::Cancelling;
            }
            self.actions.push_back(TaskAction::Cancel(id));
        }
        // Kept sessions close (issue 38 design §2, `hub_stopping`): their rows already hold
        // the last turn's state, which is how a restart finds them.
        for id in self.turns.all_kept() {
            self.turns.unkeep(&id);
            self.actions.push_back(TaskAction::Close(id));
        }
    }
}

/// A stored task's `permission` and `allow`, read back (`stored_approvals`).
struct StoredApprovals {
    permission: Option<crate::acp::PermissionPolicy>,
    allow: Vec<crate::wire::approval::AllowRule>,
    /// A line for the service log when the rules could not be read.
    note: Option<String>,
}

/// A word or rules this binary cannot read never widen what the task may do: an unknown
/// word runs it under `reject`, unreadable rules are dropped with a log line, so a damaged
/// row fails closed.
fn stored_approvals(id: &TaskId, permission: Option<&str>, allow: Option<&str>) -> StoredApprovals {
    use crate::acp::PermissionPolicy;
    use crate::wire::approval::{check_allow, AllowRule};
    let permission =
        permission.map(|p| PermissionPolicy::from_tag(p).unwrap_or(PermissionPolicy::Reject));
    let read = |text: &str| {
        serde_json::from_str::<Vec<AllowRule>>(text)
            .ok()
            .filter(|r| check_allow(r).is_ok())
    };
    let (allow, note) = match allow.map(read) {
        None => (Vec::new(), None),
        Some(Some(rules)) => (rules, None),
        Some(None) => (
            Vec::new(),
            Some(format!(
                "task {id}: its stored allow rules cannot be read; it runs without them"
            )),
        ),
    };
    StoredApprovals {
        permission,
        allow,
        note,
    }
}

/// A task's figures and budget from its schema 6 columns (issue 38 design §8); a column this
/// build cannot read is left out and said (the record then shows no figure rather than a
/// wrong one).
fn stored_metered(meter: Option<&str>, budget: Option<&str>) -> (Metered, Vec<String>) {
    let mut notes = Vec::new();
    let meter = match meter.map(Meter::from_column) {
        Some(Ok(m)) => m,
        Some(Err(why)) => {
            notes.push(why);
            Meter::default()
        }
        None => Meter::default(),
    };
    let budget = match budget.map(Budget::from_column) {
        Some(Ok(b)) => Some(b),
        Some(Err(why)) => {
            notes.push(why);
            None
        }
        None => None,
    };
    (Metered { meter, budget }, notes)
}
