//! What one refresh of `agent-hub top` saw (docs/operations.md "Watching a hub"): the hub's
//! `activity` answer (SPEC §14.1) or, from a hub without that verb, its `who` answer, the
//! open requests of the tasks the hub's `tasks` answer shows the viewer (issue 37: the ones
//! it may answer) and their usage (issue 38: `usage`), and the relay's status file when `--config` names one.
//!
//! Owns the view's own reading of those replies. It is deliberately tolerant: unknown keys
//! are ignored and every key but a name may be absent, so a hub that adds fields to `who`
//! (an agent's liveness `state`, `since`, `source`) or to `activity` never breaks the view,
//! and one without them shows `-`. Values of an unexpected JSON type are shown as their JSON
//! text rather than failing the refresh. Refuses IO: `run` fetches, this reads.
// The sans-IO line (clippy.toml): no sockets, files, processes, threads, clock or OS randomness.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use crate::client::task::{RequestView, TaskRecord};
use serde::Deserialize;
use serde_json::Value;

/// One parked await's filters.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct FilterView {
    #[serde(rename = "replyTo", default)]
    pub reply_to: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
}

/// One roster agent.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct AgentView {
    pub name: String,
    #[serde(default)]
    pub parked: Vec<FilterView>,
    #[serde(default)]
    pub queued: u64,
    #[serde(rename = "lastSeen", default)]
    pub last_seen: Option<String>,
    #[serde(rename = "lastDelivery", default)]
    pub last_delivery: Option<String>,
    /// Liveness (issue 12): `waiting`, `busy`, `idle`, `gone`, `unknown`; absent from a hub
    /// that does not report it. Kept as JSON so any type reads.
    #[serde(default)]
    pub state: Option<Value>,
    #[serde(default)]
    pub since: Option<Value>,
    #[serde(default)]
    pub source: Option<Value>,
}

/// A JSON value as a short display text: a string without quotes, anything else as JSON.
pub fn text_of(v: &Option<Value>) -> Option<String> {
    match v {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => Some(other.to_string()),
    }
}

impl AgentView {
    /// The liveness state, or None when the hub does not say.
    pub fn state_text(&self) -> Option<String> {
        text_of(&self.state)
    }
}

/// One recently accepted envelope (metadata only; the reply has no body).
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct EnvelopeView {
    #[serde(default)]
    pub id: String,
    #[serde(default)]
    pub from: String,
    #[serde(default)]
    pub to: String,
    #[serde(default)]
    pub kind: String,
    #[serde(rename = "acceptedAt", default)]
    pub accepted_at: Option<String>,
    #[serde(default)]
    pub state: String,
    #[serde(rename = "stateAt", default)]
    pub state_at: Option<String>,
}

/// One unfinished task.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct TaskView {
    #[serde(default)]
    pub task: String,
    #[serde(default)]
    pub agent: String,
    #[serde(default)]
    pub delegator: String,
    #[serde(default)]
    pub peer: Option<String>,
    #[serde(default)]
    pub state: String,
    #[serde(rename = "createdAt", default)]
    pub created_at: Option<String>,
    #[serde(rename = "startedAt", default)]
    pub started_at: Option<String>,
}

/// A queue whose name nobody holds (SPEC §14 "Mail nobody holds"): a typo, an address for a
/// hub this one does not forward to, an ended task's identity.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
pub struct OffRosterView {
    pub name: String,
    #[serde(default)]
    pub queued: u64,
    /// `no such agent`, `unknown peer`, `task ended`, or a later hub's word (shown as it is).
    #[serde(default)]
    pub reason: String,
}

/// The `activity` payload as the view reads it (a `who` payload reads as one too: `agents`
/// and `offRoster` only).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
pub struct ActivityView {
    #[serde(default)]
    pub agents: Vec<AgentView>,
    #[serde(default)]
    pub envelopes: Vec<EnvelopeView>,
    #[serde(default)]
    pub tasks: Vec<TaskView>,
    /// None from a hub that does not report them (before `offRoster`), so the views can say
    /// they do not know rather than "none".
    #[serde(rename = "offRoster", default)]
    pub off_roster: Option<Vec<OffRosterView>>,
}

/// One relay link, from the relay's status file (`relay_status`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinkView {
    pub peer: String,
    pub state: String,
    pub direction: Option<String>,
    pub last_heartbeat: Option<String>,
    pub reconnects: u64,
    pub last_error: Option<String>,
}

impl LinkView {
    pub fn from_status(s: &agent_hub_host::relay_status::RelayStatus) -> Vec<LinkView> {
        s.peers
            .iter()
            .map(|p| LinkView {
                peer: p.id.clone(),
                state: p.state.clone(),
                direction: p.direction.clone(),
                last_heartbeat: p.last_heartbeat.clone(),
                reconnects: p.reconnects,
                last_error: p.last_error.clone(),
            })
            .collect()
    }
}

/// One open request of a task, as the hub's `tasks` answer lists it to the viewer (issue 37):
/// a task's delegator sees its own tasks' requests, a name in `tasks.approvers` every task's.
/// `activity` carries none: it is metadata for operators, and an operator may not answer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenRequest {
    pub task: String,
    pub request: RequestView,
}

impl OpenRequest {
    /// The request's id, when the hub gave one.
    pub fn id(&self) -> Option<&str> {
        self.request.request.as_deref().filter(|r| !r.is_empty())
    }

    /// Whether `top` can answer it: it has an id and offers options.
    pub fn answerable(&self) -> bool {
        self.id().is_some() && !self.request.options.is_empty()
    }
}

/// The open requests of `records` (a `tasks` answer), in the order the view shows them: the
/// tasks `activity` lists first, in its order, then any other task the answer holds (an
/// approver's view of another delegator's task), each task's requests as the hub lists them
/// (oldest first).
pub fn open_requests(tasks: &[TaskView], records: &[TaskRecord]) -> Vec<OpenRequest> {
    let rank = |task: &str| {
        tasks
            .iter()
            .position(|t| t.task == task)
            .unwrap_or(tasks.len())
    };
    let mut with: Vec<&TaskRecord> = records.iter().filter(|r| !r.requests.is_empty()).collect();
    with.sort_by_key(|r| rank(&r.task));
    with.into_iter()
        .flat_map(|r| {
            r.requests.iter().map(|q| OpenRequest {
                task: r.task.clone(),
                request: q.clone(),
            })
        })
        .collect()
}

/// Where the hub's part of a refresh came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The `activity` verb: agents, envelopes and tasks.
    Activity,
    /// A hub without `activity`: `who` only, so no envelopes or tasks.
    WhoOnly,
}

/// Everything one refresh saw.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    /// When it was taken (RFC 3339, UTC), shown in the header.
    pub taken: chrono::DateTime<chrono::Utc>,
    /// The hub's answer, or why there is none this time (the view keeps refreshing).
    pub hub: Result<(Source, ActivityView), String>,
    /// While refreshes fail: when the first of them did (the view says how long it has been).
    pub down_since: Option<chrono::DateTime<chrono::Utc>>,
    /// The open requests the viewer may answer (`open_requests`); empty when none is open or
    /// the hub lists none (one from before issue 37, or one without `[tasks]`).
    pub requests: Vec<OpenRequest>,
    /// Issue 38: the tokens and cost of the tasks the same `tasks` answer lists; None when
    /// the hub lists none (no `[tasks]` table, a hub without `activity`, a failed answer).
    pub usage: Option<super::usage::UsageSums>,
    /// Relay links: None without `--config` or without a `[relay]` table; Err when the
    /// status file cannot be read.
    pub links: Option<Result<Vec<LinkView>, String>>,
}

/// An `activity` or `who` payload that does not read as the view's type (not JSON, or an
/// agent without a name).
#[derive(Debug)]
pub enum PayloadError {
    /// What serde said about the JSON text.
    Json(serde_json::Error),
}

impl std::fmt::Display for PayloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PayloadError::Json(e) => write!(f, "unexpected reply from the hub: {e}"),
        }
    }
}

impl std::error::Error for PayloadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            PayloadError::Json(e) => Some(e),
        }
    }
}

/// Reads an `activity` or `who` payload (the JSON text inside the tag).
pub fn read_payload(text: &str) -> Result<ActivityView, PayloadError> {
    serde_json::from_str(text).map_err(PayloadError::Json)
}

/// How much a row needs an operator's eye, and the note that says why (docs/operations.md
/// "Watching a hub", the NOTE column). Every note is a fact the view can stand behind for
/// whoever looks: what it cannot see, it does not guess at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attention {
    Fine,
    /// Nothing to do, but worth saying (mail that will be taken).
    Note(&'static str),
    /// Mail waits and nothing will take it soon without help.
    Warn(&'static str),
    /// Mail waits and no reader exists or will come.
    Stuck(&'static str),
}

impl Attention {
    /// Sort order: stuck rows first, then warnings, then the rest.
    pub fn severity(self) -> u8 {
        match self {
            Attention::Stuck(_) => 0,
            Attention::Warn(_) => 1,
            Attention::Note(_) | Attention::Fine => 2,
        }
    }
}

/// The NOTE of an agent whose await is parked while mail sits in its queue: the await did not
/// take it, so it waits for other mail (its filters skip this), whether or not the viewer may
/// see those filters.
pub const WAITS_FOR_OTHER_MAIL: &str = "waits for other mail";

/// Whether `a` is an agent of a linked hub (SPEC §14.1 "Remote names"): its state is that
/// hub's word (`source` `relay`), and its filters never cross the link. An entry without a
/// state has `source` null on both sides, so an address (`name@peer`) without one is taken as
/// a peer's; a roster name holding `@` with no state is then judged as a peer's too (a
/// warning where it would be stuck): rare, and never a false STUCK.
pub fn is_remote(a: &AgentView) -> bool {
    match text_of(&a.source).as_deref() {
        Some("relay") => true,
        None => a.name.contains('@'),
        Some(_) => false,
    }
}

/// Whether the hub left `a`'s parked awaits out of this viewer's answer (SPEC §14
/// "Visibility": only an operator sees another agent's filters): it says `waiting`, which a
/// parked await makes it, yet lists none. A linked hub's agent never has its filters here.
pub fn filters_hidden(a: &AgentView) -> bool {
    a.state_text().as_deref() == Some("waiting") && a.parked.is_empty() && !is_remote(a)
}

/// Whether an agent looks stuck (docs/operations.md "Watching a hub"), the same for an
/// operator and for a viewer who may not see other agents' filters: the judgement rests on
/// `state` and `queued`, which every viewer gets, and on `parked` only where the hub shows
/// it to everyone (an older hub without `state`, which hid nothing).
///
/// With mail queued: `gone` is stuck (nothing reads until the agent comes back); `waiting`
/// means a parked await that did not take the mail (any await that matched would have), so it
/// waits for other mail; `idle` is a warning (its hooks read mail only when a turn ends);
/// `busy` gets it at its turn's end; `unknown` is stuck, since a parked await would make it
/// `waiting` for every viewer and no hook has reported; a linked hub's agent without a state
/// is only a warning (that hub may not report states at all); a state word this client does
/// not know is a warning it does not judge.
pub fn attention(a: &AgentView) -> Attention {
    if a.queued == 0 {
        return Attention::Fine;
    }
    match a.state_text().as_deref() {
        Some("gone") => Attention::Stuck("gone, mail queued"),
        Some("busy") => Attention::Note("gets it at turn end"),
        Some("idle") => Attention::Warn("idle, mail queued"),
        Some("waiting") => Attention::Warn(WAITS_FOR_OTHER_MAIL),
        Some("unknown") | None if is_remote(a) => Attention::Warn("no state from its hub"),
        // An await listed without `waiting` (an older hub without liveness, which lists
        // every parked await to everyone) is a reader all the same.
        Some("unknown") | None if !a.parked.is_empty() => Attention::Warn(WAITS_FOR_OTHER_MAIL),
        Some("unknown") | None => Attention::Stuck("mail queued, no reader"),
        Some(_) => Attention::Warn("state not understood"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(task: &str, requests: &[&str]) -> TaskRecord {
        TaskRecord {
            task: task.into(),
            requests: requests
                .iter()
                .map(|r| RequestView {
                    request: Some((*r).into()),
                    options: vec!["allow".into()],
                    ..RequestView::default()
                })
                .collect(),
            ..TaskRecord::default()
        }
    }

    /// Requests follow the view's task order, then the tasks `activity` does not list; each
    /// task's in the hub's order. Only one with an id and options can be answered.
    #[test]
    fn open_requests_follow_the_task_order() {
        let tasks: Vec<TaskView> = ["task-b", "task-a"]
            .iter()
            .map(|t| TaskView {
                task: (*t).into(),
                ..TaskView::default()
            })
            .collect();
        let records = [
            record("task-a", &["req-a1", "req-a2"]),
            record("task-x", &["req-x1"]),
            record("task-c", &[]),
            record("task-b", &["req-b1"]),
        ];
        let ids: Vec<String> = open_requests(&tasks, &records)
            .iter()
            .map(|o| o.id().unwrap().to_owned())
            .collect();
        assert_eq!(ids, ["req-b1", "req-a1", "req-a2", "req-x1"]);
        let mut no_options = open_requests(&tasks, &records)[0].clone();
        assert!(no_options.answerable());
        no_options.request.options.clear();
        assert!(!no_options.answerable());
        no_options.request.request = Some(String::new());
        assert_eq!(no_options.id(), None);
    }

    #[test]
    fn a_who_reply_with_or_without_liveness_reads_and_unknown_keys_are_ignored() {
        let old = r#"{"agents":[{"name":"a","parked":[{"replyTo":null,"kind":"k"}],"queued":2,"lastSeen":null,"lastDelivery":null}]}"#;
        let v = read_payload(old).unwrap();
        assert_eq!(v.agents[0].parked[0].kind.as_deref(), Some("k"));
        assert_eq!(v.agents[0].state_text(), None);
        assert!(v.envelopes.is_empty());
        let new = r#"{"agents":[{"name":"a","parked":[],"queued":0,"state":"busy","since":"2026-01-01T00:00:00Z","source":"hooks","pid":4,"extra":{"x":1}}],"envelopes":[{"id":"e","from":"a","to":"b","kind":"k","acceptedAt":"t","state":"queued","future":true}],"tasks":[],"more":[]}"#;
        let v = read_payload(new).unwrap();
        assert_eq!(v.agents[0].state_text().as_deref(), Some("busy"));
        assert_eq!(text_of(&v.agents[0].source).as_deref(), Some("hooks"));
        assert_eq!(v.envelopes[0].to, "b");
        // A state of another JSON type is shown, not a failed refresh.
        let odd = r#"{"agents":[{"name":"a","state":{"code":3},"since":12345}]}"#;
        let v = read_payload(odd).unwrap();
        assert_eq!(v.agents[0].state_text().as_deref(), Some(r#"{"code":3}"#));
        assert_eq!(text_of(&v.agents[0].since).as_deref(), Some("12345"));
        let err = read_payload(r#"{"agents":[{"queued":1}]}"#).expect_err("a name is needed");
        assert!(err
            .to_string()
            .starts_with("unexpected reply from the hub: missing field `name`"));
    }

    fn agent(queued: u64, parked: usize, state: Option<&str>) -> AgentView {
        AgentView {
            name: "a".into(),
            queued,
            parked: vec![FilterView::default(); parked],
            state: state.map(|s| Value::String(s.into())),
            source: match state {
                Some("waiting") => Some(Value::String("await".into())),
                Some("busy" | "idle" | "gone") => Some(Value::String("hook".into())),
                _ => None,
            },
            ..AgentView::default()
        }
    }

    /// The entry as a viewer who may not see others' filters gets it (SPEC §14
    /// "Visibility"): the same, with the parked awaits left out.
    fn as_non_operator(a: &AgentView) -> AgentView {
        AgentView {
            parked: Vec::new(),
            ..a.clone()
        }
    }

    /// Each case of the NOTE column, judged the same by an operator (who sees the filters)
    /// and by anyone else (who does not): never STUCK where a reader is parked.
    #[test]
    fn every_note_is_the_same_for_an_operator_and_for_a_viewer_without_the_filters() {
        let cases: [(AgentView, Attention); 12] = [
            (agent(0, 0, Some("gone")), Attention::Fine),
            (agent(0, 1, Some("waiting")), Attention::Fine),
            (
                agent(3, 0, Some("gone")),
                Attention::Stuck("gone, mail queued"),
            ),
            (
                agent(3, 0, Some("busy")),
                Attention::Note("gets it at turn end"),
            ),
            (
                agent(3, 0, Some("idle")),
                Attention::Warn("idle, mail queued"),
            ),
            // Parked, yet mail waits: its filters let it sit.
            (
                agent(1, 1, Some("waiting")),
                Attention::Warn(WAITS_FOR_OTHER_MAIL),
            ),
            (
                agent(1, 3, Some("waiting")),
                Attention::Warn(WAITS_FOR_OTHER_MAIL),
            ),
            (
                agent(3, 0, Some("unknown")),
                Attention::Stuck("mail queued, no reader"),
            ),
            // An older hub: no state, every filter shown to everyone.
            (
                agent(3, 0, None),
                Attention::Stuck("mail queued, no reader"),
            ),
            (agent(1, 1, None), Attention::Warn(WAITS_FOR_OTHER_MAIL)),
            (
                agent(2, 0, Some("napping")),
                Attention::Warn("state not understood"),
            ),
            (
                agent(2, 0, Some(r#"{"code":3}"#)),
                Attention::Warn("state not understood"),
            ),
        ];
        for (a, want) in &cases {
            assert_eq!(attention(a), *want, "operator's view of {a:?}");
            // An older hub (no state) hid nothing from anyone: no other view exists.
            if a.state.is_some() {
                let other = as_non_operator(a);
                assert_eq!(attention(&other), *want, "non-operator's view of {other:?}");
            }
        }
        // The demo of issue 35: worker parked on kind=review with a task queued, seen by the
        // orchestrator (not an operator) and by worker itself.
        let seen_by_worker = agent(1, 1, Some("waiting"));
        let seen_by_orchestrator = as_non_operator(&seen_by_worker);
        assert!(filters_hidden(&seen_by_orchestrator));
        assert!(!filters_hidden(&seen_by_worker));
        assert_eq!(attention(&seen_by_orchestrator), attention(&seen_by_worker));
        assert!(!matches!(
            attention(&seen_by_orchestrator),
            Attention::Stuck(_)
        ));
    }

    /// A linked hub's agents (SPEC §14.1 "Remote names"): their state is that hub's word and
    /// their filters never cross, so waiting is never read as hidden, and no state is no
    /// verdict.
    #[test]
    fn a_linked_hubs_agent_is_judged_on_its_hubs_word_only() {
        let remote = |state: Option<&str>, queued: u64| AgentView {
            name: "reviewer@mini".into(),
            queued,
            state: state.map(|s| Value::String(s.into())),
            source: state
                .filter(|s| *s != "unknown")
                .map(|_| Value::String("relay".into())),
            ..AgentView::default()
        };
        assert!(is_remote(&remote(Some("waiting"), 1)));
        assert!(is_remote(&remote(None, 1)));
        assert!(!filters_hidden(&remote(Some("waiting"), 1)));
        assert_eq!(
            attention(&remote(Some("waiting"), 1)),
            Attention::Warn(WAITS_FOR_OTHER_MAIL)
        );
        assert_eq!(
            attention(&remote(Some("unknown"), 2)),
            Attention::Warn("no state from its hub")
        );
        assert_eq!(
            attention(&remote(None, 2)),
            Attention::Warn("no state from its hub")
        );
        assert_eq!(
            attention(&remote(Some("gone"), 2)),
            Attention::Stuck("gone, mail queued")
        );
        assert_eq!(attention(&remote(Some("busy"), 0)), Attention::Fine);
        // A local agent that waits is never taken for a peer's, '@' or not.
        let mut local = agent(1, 0, Some("waiting"));
        local.name = "ops@lab".into();
        assert!(!is_remote(&local) && filters_hidden(&local));
    }
}
