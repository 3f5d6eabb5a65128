//! The replies of the delegation verbs, client side (issue 11; docs/delegation.md
//! "Clients"): `delegate`, `task_status`, `tasks`, `cancel`, (issue 37) `task_answer`, with a
//! record's open requests, and (issue 38) `task_prompt` and `task_close`.
//!
//! Owns: reading each reply tolerantly: unknown keys are ignored, `null` is accepted wherever
//! a key may be absent, and a `state` this client does not know is passed on as it is (a later
//! hub may add states, as SPEC §12.4 says of `status`). That is why the replies have types of
//! their own here while the wire's (`wire::task`) are strict: those are what a hub writes, and
//! a client must read what a later hub writes too. Refuses: encoding any request line (every
//! line is `wire::ClientLine`'s: one type per verb for both sides, PLAN.md §14), any IO
//! (`client` runs the exchange) and any printing.
// The sans-IO line (clippy.toml): no sockets, files, processes, threads, clock or OS randomness.
#![deny(clippy::disallowed_methods, clippy::disallowed_types)]

use super::ClientError;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::collections::BTreeMap;

/// The kind of the one envelope that ends every task (correlationId = the task id); the
/// wire's, which only the hub may write (SPEC §3.4).
pub const TASK_OUTCOME_KIND: &str = agent_hub_proto::wire::Envelope::TASK_OUTCOME_KIND;
/// The kind of a running task's progress envelopes (only with `progressSecs > 0`).
pub const TASK_PROGRESS_KIND: &str = agent_hub_proto::wire::Envelope::TASK_PROGRESS_KIND;
/// The kind of the envelopes that bring a task's requests for an answer (issue 37).
pub const TASK_REQUEST_KIND: &str = agent_hub_proto::wire::Envelope::TASK_REQUEST_KIND;
/// The final state that `delegate --wait` turns into exit 0; any other is `WAIT_NOT_COMPLETED`.
pub const COMPLETED: &str = "completed";
/// Exit code of `delegate --wait` when the task ended in any state but `completed` (docs/
/// delegation.md "Exit codes"); 1 and 2 keep their SPEC §9.5 meanings.
pub const WAIT_NOT_COMPLETED: u8 = 3;

/// A delegation as the client asks for it: the wire's own type (one type per verb for both
/// sides, PLAN.md §14). `None` leaves the choice to the hub's `[tasks]` defaults, and the
/// line leaves the key out.
pub use agent_hub_proto::wire::DelegateRequest;
/// An answer to a task's open request, as the client sends it: the wire's own type.
pub use agent_hub_proto::wire::TaskAnswerRequest;

/// A reply: the payload's JSON text exactly as the hub sent it (for `--json` and the MCP
/// tools, so keys the client does not know survive) and its tolerant reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer<T> {
    pub text: String,
    pub value: T,
}

/// `delegated`: the new task's id and its first state (`queued`); read tolerantly, so a later
/// hub's keys never break it (issue 38 design §5).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Delegated {
    pub task: String,
    #[serde(default)]
    pub state: Option<String>,
    /// Where `--peer auto` ran it: the peer (absent: this hub).
    #[serde(default)]
    pub peer: Option<String>,
    /// `--peer auto`'s choice and its reason.
    #[serde(default)]
    pub placement: Option<agent_hub_proto::wire::PlacementReply>,
}

/// One task record (docs/delegation.md; the hub sends its keys in this order, absent when not
/// present). Every key but `task` may be missing or `null` here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRecord {
    pub task: String,
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(default)]
    pub peer: Option<String>,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub position: Option<u64>,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub started_at: Option<String>,
    #[serde(default)]
    pub ended_at: Option<String>,
    #[serde(default)]
    pub elapsed_ms: Option<u64>,
    #[serde(default)]
    pub stop_reason: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
    /// Issue 37: the task's open requests (absent, null or empty when none is open, and from
    /// a hub that holds none).
    #[serde(default, deserialize_with = "null_as_empty")]
    pub requests: Vec<RequestView>,
    /// Issue 38: the task's figures and budget (docs/delegation.md "Cost and usage"); a value
    /// of another shape (a later hub's) reads as absent rather than failing the record.
    #[serde(default, deserialize_with = "lenient")]
    pub usage: Option<agent_hub_proto::wire::usage::UsageFigures>,
    #[serde(default, deserialize_with = "lenient")]
    pub cost: Option<agent_hub_proto::wire::usage::CostFigures>,
    #[serde(default, deserialize_with = "lenient")]
    pub context: Option<agent_hub_proto::wire::usage::ContextFigures>,
    #[serde(default, deserialize_with = "lenient")]
    pub budget: Option<agent_hub_proto::wire::usage::BudgetFigures>,
}

/// A value of `T`'s shape, else None (null, or a shape this client does not know).
fn lenient<'de, D: serde::Deserializer<'de>, T: serde::de::DeserializeOwned>(
    d: D,
) -> Result<Option<T>, D::Error> {
    let v = Option::<serde_json::Value>::deserialize(d)?;
    Ok(v.and_then(|v| serde_json::from_value(v).ok()))
}

/// One open request in a task record, read tolerantly (every key may be missing or null).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestView {
    #[serde(default)]
    pub request: Option<String>,
    /// `permission` or `question`, or a later hub's word.
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub title: Option<String>,
    #[serde(default)]
    pub tool_kind: Option<String>,
    /// The option ids offered (entries that are not strings are skipped).
    #[serde(default, deserialize_with = "option_ids")]
    pub options: Vec<String>,
    #[serde(default)]
    pub opened_at: Option<String>,
    #[serde(default)]
    pub expires_at: Option<String>,
    #[serde(default)]
    pub waiting_ms: Option<u64>,
}

/// `task_answer`'s reply: the request answered, with which option, and its state
/// (`answered`, or a later hub's word).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct TaskAnswered {
    #[serde(default)]
    pub task: Option<String>,
    #[serde(default)]
    pub request: Option<String>,
    #[serde(default)]
    pub option: Option<String>,
    #[serde(default)]
    pub state: Option<String>,
}

/// Whether a hub's error says it does not know the verb at all (SPEC §10.3): an agent-hub
/// from before it, whose decoder lists the tags it knows.
pub fn unknown_verb(message: &str) -> bool {
    message.starts_with("malformed line: unknown tag")
}

/// Whether a hub's refusal of a `delegate` says it does not know one of its keys (a hub from
/// before issue 37 meeting `permission` or `allow`).
pub fn unknown_delegate_key(message: &str) -> bool {
    message.starts_with("malformed line: unknown field in `delegate`")
}

/// `tasks`: the asker's tasks, newest last.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct TaskList {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub tasks: Vec<TaskRecord>,
}

/// `task_prompt`'s reply (issue 38): the follow-up's turn and the task's state (`running`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct Prompted {
    #[serde(default)]
    pub task: Option<String>,
    #[serde(default)]
    pub turn: Option<u32>,
    #[serde(default)]
    pub state: Option<String>,
}

/// A follow-up as the client sends it: the wire's own type.
pub use agent_hub_proto::wire::TaskPromptRequest;

/// `cancel`: the state after the request (`cancelled`, `cancelling`, a final state the task
/// had already reached, or `unknown`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Cancelled {
    #[serde(default)]
    pub task: Option<String>,
    #[serde(default)]
    pub state: Option<String>,
}

fn null_as_empty<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

/// A list of option ids: null is none, and an entry that is not a string is skipped rather
/// than failing the whole record (a later hub may send objects).
fn option_ids<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let v = Option::<Vec<serde_json::Value>>::deserialize(d)?.unwrap_or_default();
    Ok(v.into_iter()
        .filter_map(|x| x.as_str().map(str::to_owned))
        .collect())
}

/// Reads one reply line (without its `\n`) that must be `{"<tag>":{…}}`. An `error` line
/// becomes `ClientError::Hub` with the hub's text: the usual `{"error":{"message":…}}`, or a
/// bare string.
pub fn payload(line: &[u8], tag: &str) -> Result<String, ClientError> {
    let text = std::str::from_utf8(line)
        .map_err(|_| ClientError::Protocol("the reply is not UTF-8".into()))?;
    let map: BTreeMap<String, Box<RawValue>> = serde_json::from_str(text).map_err(|e| {
        ClientError::Protocol(format!("the reply is not a JSON object with one tag: {e}"))
    })?;
    let keys = map.len();
    let (Some((key, value)), 1) = (map.into_iter().next(), keys) else {
        return Err(ClientError::Protocol(format!(
            "expected {tag}, got an object with {keys} keys"
        )));
    };
    if key == "error" {
        return Err(ClientError::Hub(error_message(value.get())?));
    }
    if key != tag {
        return Err(ClientError::Protocol(format!("expected {tag}, got {key}")));
    }
    if !value.get().trim_start().starts_with('{') {
        return Err(ClientError::Protocol(format!(
            "the {tag} reply is not a JSON object"
        )));
    }
    Ok(value.get().to_owned())
}

fn error_message(payload: &str) -> Result<String, ClientError> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum ErrorPayload {
        Object { message: String },
        Text(String),
    }
    match serde_json::from_str::<ErrorPayload>(payload) {
        Ok(ErrorPayload::Object { message } | ErrorPayload::Text(message)) => Ok(message),
        Err(_) => Err(ClientError::Protocol(
            "an error line without a message".into(),
        )),
    }
}

/// `payload` and its reading as `T`.
pub fn answer<T: for<'de> Deserialize<'de>>(
    line: &[u8],
    tag: &str,
) -> Result<Answer<T>, ClientError> {
    let text = payload(line, tag)?;
    let value = serde_json::from_str(&text)
        .map_err(|e| ClientError::Protocol(format!("unexpected {tag} reply: {e}")))?;
    Ok(Answer { text, value })
}

/// The `state` in a `task_outcome` envelope's body, if it has one that is a string.
pub fn outcome_state(envelope: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(envelope).ok()?;
    v.get("body")?.get("state")?.as_str().map(str::to_owned)
}

/// The exit code `delegate --wait` ends with for an outcome in `state`.
pub fn wait_exit_code(state: Option<&str>) -> u8 {
    if state == Some(COMPLETED) {
        0
    } else {
        WAIT_NOT_COMPLETED
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn replies_are_read_tolerantly() {
        let a: Answer<Delegated> = answer(
            br#"{"delegated":{"task":"task-ab","state":"queued"}}"#,
            "delegated",
        )
        .unwrap();
        assert_eq!(a.value.task, "task-ab");
        assert_eq!(a.value.state.as_deref(), Some("queued"));
        assert_eq!(a.text, r#"{"task":"task-ab","state":"queued"}"#);

        // Unknown states and keys pass, nulls stand for absent keys; the text is kept as sent.
        let line = br#"{"task_status":{"task":"task-1","agent":null,"state":"frozen","position":null,"later":{"x":1}}}"#;
        let a: Answer<TaskRecord> = answer(line, "task_status").unwrap();
        assert_eq!(a.value.state.as_deref(), Some("frozen"));
        assert_eq!(a.value.agent, None);
        assert!(a.text.contains("\"later\":{\"x\":1}"));

        let a: Answer<TaskList> = answer(br#"{"tasks":{"tasks":null}}"#, "tasks").unwrap();
        assert!(a.value.tasks.is_empty());
        let a: Answer<TaskList> = answer(br#"{"tasks":{}}"#, "tasks").unwrap();
        assert!(a.value.tasks.is_empty());
        let a: Answer<TaskList> = answer(
            br#"{"tasks":{"tasks":[{"task":"t1","state":"running"},{"task":"t2"}]}}"#,
            "tasks",
        )
        .unwrap();
        assert_eq!(a.value.tasks.len(), 2);
        assert_eq!(a.value.tasks[1].state, None);

        let a: Answer<Cancelled> = answer(
            br#"{"cancel":{"task":"t1","state":"cancelling"}}"#,
            "cancel",
        )
        .unwrap();
        assert_eq!(a.value.state.as_deref(), Some("cancelling"));
    }

    #[test]
    fn open_requests_and_answers_are_read_tolerantly() {
        let line = br#"{"task_status":{"task":"task-1","state":"running","requests":[{"request":"req-1","type":"permission","title":"Run cargo test","toolKind":"execute","options":["allow",{"id":"x"},"reject"],"openedAt":"2026-12-01T10:00:00.000Z","expiresAt":"2026-12-01T10:10:00.000Z","waitingMs":4000,"later":1},{"request":null,"options":null}]}}"#;
        let a: Answer<TaskRecord> = answer(line, "task_status").unwrap();
        let r = &a.value.requests;
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].options, ["allow", "reject"]);
        assert_eq!(r[0].tool_kind.as_deref(), Some("execute"));
        assert_eq!(r[0].waiting_ms, Some(4000));
        assert_eq!(r[1], RequestView::default());
        for none in [
            &br#"{"task_status":{"task":"t","requests":null}}"#[..],
            br#"{"task_status":{"task":"t"}}"#,
        ] {
            let a: Answer<TaskRecord> = answer(none, "task_status").unwrap();
            assert!(a.value.requests.is_empty());
        }
        let a: Answer<TaskAnswered> = answer(
            br#"{"task_answer":{"task":"t","request":"req-1","option":"allow","state":"answered","at":"later"}}"#,
            "task_answer",
        )
        .unwrap();
        assert_eq!(a.value.request.as_deref(), Some("req-1"));
        assert_eq!(a.value.state.as_deref(), Some("answered"));
        assert!(unknown_verb(
            "malformed line: unknown tag, expected one of `hello`, `send`"
        ));
        assert!(!unknown_verb(
            "invalid task_answer: task-1 has no open request"
        ));
        assert!(unknown_delegate_key(
            "malformed line: unknown field in `delegate`, expected one of `agent`"
        ));
        assert!(!unknown_delegate_key("invalid delegate: unknown agent"));
    }

    #[test]
    fn error_lines_are_the_hubs_words() {
        for line in [
            &br#"{"error":{"message":"invalid delegate: unknown agent \"x\""}}"#[..],
            br#"{"error":"invalid delegate: unknown agent \"x\""}"#,
        ] {
            match payload(line, "delegated") {
                Err(ClientError::Hub(m)) => assert_eq!(m, "invalid delegate: unknown agent \"x\""),
                other => panic!("{other:?}"),
            }
        }
        assert!(matches!(
            payload(br#"{"error":{"code":3}}"#, "delegated"),
            Err(ClientError::Protocol(_))
        ));
    }

    #[test]
    fn wrong_replies_are_protocol_errors() {
        for line in [
            &b"not json"[..],
            b"[1]",
            b"{}",
            br#"{"status":{"id":"x","state":"queued"}}"#,
            br#"{"delegated":{"task":"t"},"extra":{}}"#,
            br#"{"delegated":"task-1"}"#,
            br#"{"delegated":[1]}"#,
            b"\xff{}",
        ] {
            assert!(
                matches!(payload(line, "delegated"), Err(ClientError::Protocol(_))),
                "{}",
                String::from_utf8_lossy(line)
            );
        }
        // A delegated reply must name the task.
        assert!(matches!(
            answer::<Delegated>(br#"{"delegated":{"state":"queued"}}"#, "delegated"),
            Err(ClientError::Protocol(_))
        ));
        assert!(matches!(
            answer::<TaskRecord>(
                br#"{"task_status":{"task":"t","position":"two"}}"#,
                "task_status"
            ),
            Err(ClientError::Protocol(_))
        ));
    }

    #[test]
    fn wait_exit_codes() {
        let env = |state: &str| {
            json!({"id":"i","from":"hub","to":"a","ts":"t","kind":TASK_OUTCOME_KIND,
                "correlationId":"task-1","body":{"task":"task-1","state":state,"text":""}})
            .to_string()
        };
        assert_eq!(
            outcome_state(&env("completed")).as_deref(),
            Some("completed")
        );
        assert_eq!(
            wait_exit_code(outcome_state(&env("completed")).as_deref()),
            0
        );
        for s in [
            "failed",
            "cancelled",
            "timed_out",
            "refused",
            "hub_restarted",
            "Completed",
            "new",
        ] {
            assert_eq!(
                wait_exit_code(outcome_state(&env(s)).as_deref()),
                WAIT_NOT_COMPLETED,
                "{s}"
            );
        }
        assert_eq!(outcome_state(r#"{"body":"completed"}"#), None);
        assert_eq!(outcome_state("nope"), None);
        assert_eq!(wait_exit_code(None), WAIT_NOT_COMPLETED);
    }
}
