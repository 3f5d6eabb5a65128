//! `Approvals` on a virtual clock (issue 37 design §4, §5, §8, §9): no book, no hub, no
//! sleeps. Each test drives the machine with what the book would hand it and reads what it
//! hands back: the commits (envelope, audit, store), the decisions, the refusals' exact words.

use super::*;
use crate::acp::{OptionKind, RequestOption as AskOption};
use crate::kernel::ids::SeededIds;
use crate::wire::approval::{ExpiryReason, Fallback, TaskRequestBody};
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

const TASK: &str = "task-0123456789abcdef0123456789abcdef";
const OTHER: &str = "task-fedcba9876543210fedcba9876543210";

struct Clock {
    origin: Instant,
    wall0: DateTime<Utc>,
    ms: u64,
}

impl Clock {
    fn new() -> Clock {
        Clock {
            origin: crate::kernel::deadline::test_origin(),
            wall0: DateTime::<Utc>::from_timestamp_millis(1_795_000_000_000).unwrap(),
            ms: 0,
        }
    }
    fn now(&self) -> Now {
        Now {
            mono: self.origin + Duration::from_millis(self.ms),
            wall: self.wall0 + chrono::Duration::milliseconds(self.ms as i64),
        }
    }
    fn advance_secs(&mut self, s: u64) {
        self.ms += s * 1000;
    }
}

fn settings() -> ApprovalSettings {
    ApprovalSettings {
        approvers: vec!["lead".into()],
        ..ApprovalSettings::default()
    }
}

/// Claude's options, as the capture has them.
fn ask(seq: u32) -> RequestAsk {
    let opt = |id: &str, name: &str, kind| AskOption {
        option_id: id.into(),
        name: name.into(),
        kind,
    };
    RequestAsk {
        seq,
        kind: RequestKind::Permission,
        tool_call_id: format!("toolu_{seq}"),
        title: "Run cargo test".into(),
        tool_kind: Some("execute".into()),
        paths: vec!["src/a.rs".into()],
        command: Some("cargo test".into()),
        message: None,
        schema: None,
        options: vec![
            opt("allow_always", "Always Allow", OptionKind::AllowAlways),
            opt("allow", "Allow", OptionKind::AllowOnce),
            opt("reject", "Reject", OptionKind::RejectOnce),
        ],
    }
}

/// A question as the session reads an `elicitation/create` form (`acp::question`).
fn question(seq: u32) -> RequestAsk {
    RequestAsk {
        kind: RequestKind::Question,
        message: Some("Which branch?".into()),
        schema: Some(r#"{"properties":{"branch":{"type":"string"}},"type":"object"}"#.into()),
        tool_kind: None,
        command: None,
        paths: Vec::new(),
        options: crate::acp::question::options(),
        ..ask(seq)
    }
}

struct Rig {
    a: Approvals,
    ids: SeededIds,
    clock: Clock,
    task: TaskId,
    other: TaskId,
}

impl Rig {
    fn new(settings: ApprovalSettings) -> Rig {
        Rig {
            a: Approvals::new(settings),
            ids: SeededIds::new(7),
            clock: Clock::new(),
            task: TaskId::parse(TASK).unwrap(),
            other: TaskId::parse(OTHER).unwrap(),
        }
    }

    fn facts(&self) -> TaskFacts<'_> {
        TaskFacts {
            task: &self.task,
            delegator: "boss",
            agent: "claude",
            route: Route::Local,
        }
    }

    fn open(&mut self, ask: RequestAsk) -> Opened {
        let now = self.clock.now();
        let task = self.task.clone();
        let facts = TaskFacts {
            task: &task,
            delegator: "boss",
            agent: "claude",
            route: Route::Local,
        };
        self.a.open(facts, ask, Source::Runner, now, &mut self.ids)
    }

    fn held(&mut self, ask: RequestAsk) -> (String, TaskCommit) {
        match self.open(ask) {
            Opened::Held { request, commit } => (request, commit),
            other => panic!("not held: {other:?}"),
        }
    }

    fn answer_as(
        &mut self,
        name: &str,
        request: Option<&str>,
        option: &str,
        message: Option<&str>,
    ) -> Result<Answering, AnswerRefusal> {
        let task = self.task.clone();
        let facts = TaskFacts {
            task: &task,
            delegator: "boss",
            agent: "claude",
            route: Route::Local,
        };
        let who = Asker {
            name,
            sees: name == "boss" || name == "lead",
            may_answer: name == "boss" || name == "lead",
        };
        let req = TaskAnswerRequest {
            task: TASK.into(),
            request: request.map(str::to_owned),
            option: option.into(),
            message: message.map(str::to_owned),
        };
        self.a.answer(facts, who, &req)
    }

    fn answer(&mut self, request: Option<&str>, option: &str) -> Result<Answering, AnswerRefusal> {
        self.answer_as("boss", request, option, None)
    }

    fn expire(&mut self) -> Vec<Expiry> {
        let now = self.clock.now();
        self.a.handle_timeout(now, &mut self.ids)
    }
}

fn body_of(c: &TaskCommit) -> serde_json::Value {
    let env = c.envelope.as_ref().expect("an envelope");
    serde_json::from_str(env.body.get()).unwrap()
}

#[test]
fn the_request_id_is_the_designs_hash_and_changes_with_what_was_asked() {
    let task = TaskId::parse(TASK).unwrap();
    let a = ask(3);
    let mut h = Sha256::new();
    h.update(TASK.as_bytes());
    h.update([0]);
    h.update(b"3");
    h.update([0]);
    h.update(b"toolu_3");
    h.update([0]);
    h.update(
        br#"[{"optionId":"allow_always","name":"Always Allow","kind":"allow_always"},{"optionId":"allow","name":"Allow","kind":"allow_once"},{"optionId":"reject","name":"Reject","kind":"reject_once"}]"#,
    );
    let hex: String = h.finalize()[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let id = request_id(&task, &a);
    assert_eq!(id, format!("req-{hex}"));
    assert!(is_request_id(&id));
    assert_eq!(request_id(&task, &a), id, "the same request, the same id");
    let mut changed = a.clone();
    changed.options.pop();
    assert_ne!(request_id(&task, &changed), id, "other options, another id");
    changed = a.clone();
    changed.tool_call_id = "toolu_9".into();
    assert_ne!(request_id(&task, &changed), id);
    assert_ne!(request_id(&task, &ask(4)), id);
    assert_ne!(request_id(&TaskId::parse(OTHER).unwrap(), &a), id);
    for bad in [
        "req-0123",
        "req-0123456789ABCDEF",
        "rex-0123456789abcdef",
        "",
    ] {
        assert!(!is_request_id(bad), "{bad}");
    }
}

/// Design §4.2, §5, §9: a held request's one commit carries the envelope (from the hub, to
/// the delegator, correlated by the task, keys in order), `request_opened` with metadata
/// only, and the store row a restart closes by.
#[test]
fn a_held_request_commits_its_envelope_audit_and_row_together() {
    let mut r = Rig::new(settings());
    let (request, c) = r.held(ask(1));
    let env = c.envelope.as_ref().unwrap();
    assert_eq!((env.from.as_str(), env.to.as_str()), ("hub", "boss"));
    assert_eq!(env.kind, "task_request");
    assert_eq!(env.correlation_id.as_deref(), Some(TASK));
    let text = env.body.get();
    assert_eq!(
        text,
        format!(
            "{{\"task\":\"{TASK}\",\"request\":\"{request}\",\"state\":\"open\",\"type\":\"permission\",\"agent\":\"claude\",\
             \"toolCall\":{{\"id\":\"toolu_1\",\"title\":\"Run cargo test\",\"kind\":\"execute\",\"paths\":[\"src/a.rs\"],\"command\":\"cargo test\"}},\
             \"options\":[{{\"optionId\":\"allow_always\",\"name\":\"Always Allow\",\"kind\":\"allow_always\"}},{{\"optionId\":\"allow\",\"name\":\"Allow\",\"kind\":\"allow_once\"}},{{\"optionId\":\"reject\",\"name\":\"Reject\",\"kind\":\"reject_once\"}}],\
             \"openedAt\":\"2026-11-18T11:06:40.000Z\",\"expiresAt\":\"2026-11-18T11:16:40.000Z\",\
             \"answer\":\"agent-hub task answer --id {TASK} --request {request} --option OPTION\"}}"
        )
    );
    assert!(matches!(
        TaskRequestBody::from_json(text),
        Ok(TaskRequestBody::Open(_))
    ));
    assert_eq!(
        c.audit,
        vec![TaskAudit::RequestOpened {
            task: TASK.into(),
            request: request.clone(),
            kind: "permission".into(),
            tool_kind: Some("execute".into()),
        }]
    );
    let mut line = String::new();
    c.audit[0].encode_fields_into(&mut line);
    assert!(
        !line.contains("cargo test") && !line.contains("src/a.rs"),
        "{line}"
    );
    assert_eq!(
        c.store,
        vec![TaskStoreOp::OpenRequest(StoredRequest {
            request: request.clone(),
            task: TASK.into(),
            seq: 1,
            kind: "permission".into(),
            tool_kind: Some("execute".into()),
            opened_ms: 1_795_000_000_000,
            expires_ms: 1_795_000_600_000,
        })]
    );
    assert_eq!(r.a.open_count(), 1);
    assert!(r.a.has_open(&r.task));
    assert!(!r.a.has_open(&r.other));
}

/// Design §8: `tasks.max_request_bytes` bounds the whole body; the free texts are cut with
/// `…`, never the ids or option ids, so the answer still names what the agent offered.
#[test]
fn a_long_request_is_cut_to_fit_max_request_bytes_never_refused() {
    let mut r = Rig::new(ApprovalSettings {
        max_request_bytes: 1024,
        ..settings()
    });
    let mut big = ask(1);
    big.title = "é".repeat(200);
    big.command = Some("x".repeat(1024));
    big.paths = (0..8).map(|i| format!("{i}{}", "p".repeat(500))).collect();
    let (_, c) = r.held(big);
    let env = c.envelope.as_ref().unwrap();
    assert!(env.body.get().len() <= 1024, "{}", env.body.get().len());
    let body = body_of(&c);
    assert!(body["toolCall"]["command"].as_str().unwrap().ends_with('…'));
    assert!(body["toolCall"]["title"].as_str().unwrap().starts_with('é'));
    let ids: Vec<&str> = body["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["optionId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["allow_always", "allow", "reject"]);
    // Option ids alone over the cap cannot be carried: the fallback answers, at once.
    let mut ids_only = ask(2);
    ids_only.options = (0..8)
        .map(|i| AskOption {
            option_id: format!("{i}{}", "o".repeat(127)),
            name: "n".into(),
            kind: OptionKind::RejectOnce,
        })
        .collect();
    match r.open(ids_only) {
        Opened::AtOnce { commit, decision } => {
            assert!(commit.envelope.is_none());
            assert_eq!(
                commit.audit,
                vec![TaskAudit::RequestRefused {
                    task: TASK.into(),
                    why: "max_request_bytes".into()
                }]
            );
            assert!(decision.answer.option_id.unwrap().starts_with('0'));
        }
        other => panic!("{other:?}"),
    }
}

/// Design §4.2: past `max_open_requests` hub-wide a request is answered by the fallback at
/// once (the agent's reject option), audited `request_refused`, and nothing is mailed.
#[test]
fn past_the_hub_wide_cap_the_fallback_answers_at_once() {
    let mut r = Rig::new(ApprovalSettings {
        max_open_requests: 2,
        ..settings()
    });
    r.held(ask(1));
    r.held(ask(2));
    match r.open(ask(3)) {
        Opened::AtOnce { commit, decision } => {
            assert!(commit.envelope.is_none() && commit.store.is_empty());
            assert_eq!(
                commit.audit,
                vec![TaskAudit::RequestRefused {
                    task: TASK.into(),
                    why: "max_open_requests".into()
                }]
            );
            assert_eq!(decision.seq, 3);
            assert_eq!(decision.answer.option_id.as_deref(), Some("reject"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.a.open_count(), 2);
    // One closes: room for the next.
    let first = r.answer(None, "allow");
    assert!(matches!(
        first,
        Err(AnswerRefusal::SeveralOpen { count: 2, .. })
    ));
    let (store, _) = r.a.close_task(&r.task.clone(), Closed::Cancelled);
    assert_eq!(store.len(), 2);
    assert!(matches!(r.open(ask(4)), Opened::Held { .. }));
}

/// Design §7: a relay peer's task has no route for a request yet; the fallback answers it at
/// once, recorded as expired with the exact reason, and nothing is mailed to the peer's name.
#[test]
fn a_relay_peers_task_gets_the_fallback_at_once_for_no_relay_route() {
    let mut r = Rig::new(settings());
    let now = r.clock.now();
    let task = r.task.clone();
    let facts = TaskFacts {
        task: &task,
        delegator: "task-from:lab:abc",
        agent: "claude",
        route: Route::NoRoute,
    };
    match r.a.open(facts, ask(1), Source::Runner, now, &mut r.ids) {
        Opened::AtOnce { commit, decision } => {
            assert!(commit.envelope.is_none());
            let TaskAudit::RequestExpired {
                reason, fallback, ..
            } = &commit.audit[0]
            else {
                panic!("{:?}", commit.audit)
            };
            assert_eq!(reason, "no relay route to the delegator");
            assert_eq!(fallback, "reject");
            assert_eq!(decision.answer.option_id.as_deref(), Some("reject"));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.a.open_count(), 0);
}

/// SPEC §16.1: every refusal, in its order and exact words; none of them changes anything.
#[test]
fn answers_are_refused_with_the_specs_words() {
    let mut r = Rig::new(settings());
    assert_eq!(
        r.answer(None, "allow").unwrap_err().to_string(),
        format!("invalid task_answer: {TASK} has no open request")
    );
    let (first, _) = r.held(ask(1));
    let (second, _) = r.held(ask(2));
    assert_eq!(
        r.answer_as("mallory", Some(&first), "allow", None)
            .unwrap_err()
            .to_string(),
        "unknown task"
    );
    let task = r.task.clone();
    let facts = TaskFacts {
        task: &task,
        delegator: "boss",
        agent: "claude",
        route: Route::Local,
    };
    let seer = Asker {
        name: "viewer",
        sees: true,
        may_answer: false,
    };
    let req = TaskAnswerRequest {
        task: TASK.into(),
        request: Some(first.clone()),
        option: "allow".into(),
        message: None,
    };
    assert_eq!(
        r.a.answer(facts, seer, &req).unwrap_err().to_string(),
        "invalid task_answer: only the task's delegator or a name in tasks.approvers may answer"
    );
    assert_eq!(
        r.answer(None, "allow").unwrap_err().to_string(),
        format!("invalid task_answer: {TASK} has 2 open requests; name one with request")
    );
    assert_eq!(
        r.answer(Some(&first), "allow_everything\u{202e}")
            .unwrap_err()
            .to_string(),
        "invalid task_answer: option \"allow_everything?\" was not offered (offered: allow_always, allow, reject)"
    );
    // One digit of the id changed: a request this task never had.
    let mut changed = first.clone();
    let last = changed.pop().unwrap();
    changed.push(if last == '0' { '1' } else { '0' });
    assert_eq!(
        r.answer(Some(&changed), "allow").unwrap_err().to_string(),
        format!("invalid task_answer: {TASK} has no request {changed}")
    );
    // Another task's request, named under this one: not this task's.
    let now = r.clock.now();
    let other = r.other.clone();
    let ofacts = TaskFacts {
        task: &other,
        delegator: "boss",
        agent: "claude",
        route: Route::Local,
    };
    let Opened::Held {
        request: foreign, ..
    } = r.a.open(ofacts, ask(1), Source::Runner, now, &mut r.ids)
    else {
        panic!("held")
    };
    assert!(matches!(
        r.answer(Some(&foreign), "allow"),
        Err(AnswerRefusal::NoSuchRequest { .. })
    ));
    assert_eq!(r.a.open_count(), 3, "no refusal closed anything");
    assert!(r.answer(Some(&second), "reject").is_ok());
}

/// Design §4b: `accept` of a question needs the form's content, a JSON object, in `message`.
#[test]
fn accepting_a_question_needs_a_json_object() {
    let mut r = Rig::new(settings());
    let (q, c) = r.held(question(1));
    let body = body_of(&c);
    assert_eq!(body["type"], "question");
    assert_eq!(body["message"], "Which branch?");
    assert_eq!(
        body["schema"], r#"{"properties":{"branch":{"type":"string"}},"type":"object"}"#,
        "the form, as JSON text"
    );
    let kinds: Vec<(&str, &str)> = body["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["optionId"].as_str().unwrap(), o["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            ("accept", "accept"),
            ("decline", "decline"),
            ("cancel", "cancel")
        ]
    );
    for bad in [None, Some("main"), Some("[1]"), Some("\"x\"")] {
        assert_eq!(
            r.answer_as("boss", Some(&q), "accept", bad)
                .unwrap_err()
                .to_string(),
            "invalid task_answer: accept needs message to hold the form's content as a JSON object",
            "{bad:?}"
        );
    }
    let ok = r
        .answer_as("boss", Some(&q), "accept", Some("{\"branch\":\"main\"}"))
        .unwrap();
    assert_eq!(
        ok.decision.answer.message.as_deref(),
        Some("{\"branch\":\"main\"}")
    );
    // A question nobody answers gets its own `cancel`.
    let (_, _) = r.held(question(2));
    r.clock.advance_secs(600);
    let e = r.expire();
    let AfterExpiry::Answer(d) = &e[0].then else {
        panic!()
    };
    assert_eq!(d.answer.option_id.as_deref(), Some("cancel"));
}

/// Design §5: the delegator or an approver answers; the answer waits for its commit, during
/// which nobody else can answer it and the clock cannot expire it; once durable the request
/// is closed `answered`, and a stale answer is refused with that word.
#[test]
fn an_answer_closes_its_request_once_durable() {
    let mut r = Rig::new(settings());
    let (req, _) = r.held(ask(1));
    let taken = r
        .answer_as("lead", Some(&req), "allow", Some("go"))
        .unwrap();
    assert_eq!(taken.request, req);
    assert_eq!(
        taken.decision,
        Decision {
            task: r.task.clone(),
            request: req.clone(),
            seq: 1,
            source: Source::Runner,
            answer: RequestAnswer {
                option_id: Some("allow".into()),
                message: Some("go".into()),
            },
        }
    );
    assert_eq!(
        taken.commit.audit,
        vec![TaskAudit::RequestAnswered {
            task: TASK.into(),
            request: req.clone(),
            by: "lead".into(),
            option: "allow".into(),
        }]
    );
    assert_eq!(
        taken.commit.store,
        vec![TaskStoreOp::CloseRequest {
            request: req.clone()
        }]
    );
    let stale = format!("invalid task_answer: request {req} is not open (answered)");
    assert_eq!(
        r.answer(Some(&req), "reject").unwrap_err().to_string(),
        stale
    );
    assert!(r.a.records(&r.task, r.clock.now()).is_none());
    assert_eq!(
        r.a.poll_timeout(),
        None,
        "no clock runs for an answer in flight"
    );
    r.clock.advance_secs(3600);
    assert!(r.expire().is_empty());
    assert_eq!(r.a.answer_settled(&req, true), Some(r.task.clone()));
    assert_eq!(r.a.open_count(), 0);
    assert_eq!(
        r.answer(Some(&req), "reject").unwrap_err().to_string(),
        stale
    );
    assert_eq!(r.a.answer_settled(&req, true), None, "settled once");
}

/// A failed commit of an answer (or an answerer gone before it) leaves the request open as
/// it was, with its own expiry.
#[test]
fn an_answer_whose_commit_failed_leaves_the_request_open() {
    let mut r = Rig::new(settings());
    let (req, _) = r.held(ask(1));
    let expires = r.a.poll_timeout();
    r.answer(Some(&req), "allow").unwrap();
    assert_eq!(r.a.answer_settled(&req, false), Some(r.task.clone()));
    assert_eq!(r.a.poll_timeout(), expires);
    assert!(r.a.has_open(&r.task));
    assert!(r.answer(None, "reject").is_ok());
}

/// Design §4.5 `reject`: at `permission_timeout_secs` the agent gets its reject option (never
/// an allow), and the delegator an `expired` envelope with the exact reason.
#[test]
fn an_unanswered_request_expires_into_the_reject_fallback() {
    let mut r = Rig::new(settings());
    let (req, _) = r.held(ask(1));
    assert_eq!(
        r.a.poll_timeout(),
        Some(r.clock.now().mono + Duration::from_secs(600))
    );
    r.clock.advance_secs(599);
    assert!(r.expire().is_empty());
    r.clock.advance_secs(1);
    let e = r.expire();
    assert_eq!(e.len(), 1);
    assert_eq!(
        e[0].then,
        AfterExpiry::Answer(Decision {
            task: r.task.clone(),
            request: req.clone(),
            seq: 1,
            source: Source::Runner,
            answer: RequestAnswer {
                option_id: Some("reject".into()),
                message: None
            },
        })
    );
    let body = body_of(&e[0].commit);
    assert_eq!(
        TaskRequestBody::from_json(&body.to_string()).unwrap(),
        TaskRequestBody::Expired(crate::wire::approval::RequestExpired {
            task: TASK.into(),
            request: req.clone(),
            fallback: Fallback::Reject,
            reason: ExpiryReason::Timeout { secs: 600 },
        })
    );
    assert_eq!(e[0].commit.envelope.as_ref().unwrap().to, "boss");
    assert_eq!(
        e[0].commit.audit,
        vec![TaskAudit::RequestExpired {
            task: TASK.into(),
            request: req.clone(),
            fallback: "reject".into(),
            reason: "no answer within 600 s".into(),
        }]
    );
    assert_eq!(
        r.answer(Some(&req), "allow").unwrap_err().to_string(),
        format!("invalid task_answer: request {req} is not open (expired)")
    );
    assert_eq!(r.a.poll_timeout(), None);
}

/// No allow fallback: an agent that offers only allow options gets `cancelled`.
#[test]
fn the_fallback_never_allows() {
    let mut a = ask(1);
    a.options.retain(|o| o.kind.allows());
    for f in [PermissionFallback::Reject, PermissionFallback::Cancel] {
        assert_eq!(fallback_answer(&a, f).option_id, None);
    }
    let mut always = ask(1);
    always.options[2].kind = OptionKind::RejectAlways;
    assert_eq!(
        fallback_answer(&always, PermissionFallback::Reject)
            .option_id
            .as_deref(),
        Some("reject")
    );
    assert_eq!(
        fallback_answer(&always, PermissionFallback::Cancel).option_id,
        None
    );
}

/// Design §4.5 `cancel`: the expiry asks the book to cancel the task, with the reason its
/// outcome carries.
#[test]
fn under_the_cancel_fallback_an_expiry_cancels_the_task() {
    let mut r = Rig::new(ApprovalSettings {
        permission_fallback: PermissionFallback::Cancel,
        permission_timeout_secs: 30,
        ..settings()
    });
    let (req, _) = r.held(ask(1));
    r.clock.advance_secs(30);
    let e = r.expire();
    assert_eq!(
        e[0].then,
        AfterExpiry::CancelTask {
            task: r.task.clone(),
            reason: format!("no answer to request {req} within 30 s"),
        }
    );
    assert_eq!(body_of(&e[0].commit)["fallback"], "cancel");
    assert_eq!(body_of(&e[0].commit)["reason"], "no answer within 30 s");
}

/// Design §4.3: a task's cancel closes its open requests `cancelled`, its end `task_ended`,
/// one audit record and one store op each; later answers say which.
#[test]
fn a_tasks_cancel_and_end_close_its_requests() {
    let mut r = Rig::new(settings());
    let (a, _) = r.held(ask(1));
    let (b, _) = r.held(ask(2));
    let task = r.task.clone();
    let (store, audit) = r.a.close_task(&task, Closed::Cancelled);
    assert_eq!(
        store,
        [&a, &b]
            .map(|x| TaskStoreOp::CloseRequest { request: x.clone() })
            .to_vec()
    );
    assert!(audit
        .iter()
        .all(|x| matches!(x, TaskAudit::RequestClosed { why, .. } if why == "cancelled")));
    assert_eq!(
        r.answer(Some(&a), "allow").unwrap_err().to_string(),
        format!("invalid task_answer: request {a} is not open (cancelled)")
    );
    let (c, _) = r.held(ask(3));
    let (_, audit) = r.a.close_task(&task, Closed::TaskEnded);
    assert!(matches!(&audit[..], [TaskAudit::RequestClosed { why, .. }] if why == "task_ended"));
    assert_eq!(
        r.answer(Some(&c), "allow").unwrap_err().to_string(),
        format!("invalid task_answer: request {c} is not open (the task ended)")
    );
    assert!(r.a.close_task(&task, Closed::TaskEnded).0.is_empty());
}

/// Design §4.6: what the store still held is closed by the fallback, reason `hub restarted`,
/// with its `expired` envelope to a delegator the book knows; never allowed.
#[test]
fn a_restart_closes_stored_requests_by_the_fallback() {
    let mut r = Rig::new(settings());
    let row = |task: &str, request: &str| StoredRequest {
        request: request.into(),
        task: task.into(),
        seq: 1,
        kind: "permission".into(),
        tool_kind: None,
        opened_ms: 1,
        expires_ms: 2,
    };
    let rows = vec![
        row(TASK, "req-00000000000000aa"),
        row(OTHER, "req-00000000000000bb"),
    ];
    let known = |t: &TaskId| (t.as_str() == TASK).then(|| "boss".to_owned());
    let now = r.clock.now();
    let commits = r.a.restore(rows, &known, now, &mut r.ids);
    assert_eq!(commits.len(), 2);
    let body = body_of(&commits[0]);
    assert_eq!(body["state"], "expired");
    assert_eq!(body["reason"], "hub restarted");
    assert_eq!(body["fallback"], "reject");
    assert!(
        commits[1].envelope.is_none(),
        "no delegator known: nothing mailed"
    );
    for c in &commits {
        assert!(matches!(&c.store[..], [TaskStoreOp::CloseRequest { .. }]));
        assert!(
            matches!(&c.audit[..], [TaskAudit::RequestExpired { reason, .. }] if reason == "hub restarted")
        );
    }
    assert_eq!(
        r.answer(Some("req-00000000000000aa"), "allow")
            .unwrap_err()
            .to_string(),
        "invalid task_answer: request req-00000000000000aa is not open (expired)"
    );
}

/// Design §5: the record lists open requests only, oldest first, with how long each waited.
#[test]
fn the_record_lists_the_open_requests_oldest_first() {
    let mut r = Rig::new(settings());
    assert!(r.a.records(&r.task, r.clock.now()).is_none());
    let (a, _) = r.held(ask(1));
    r.clock.advance_secs(5);
    let (b, _) = r.held(ask(2));
    r.clock.advance_secs(1);
    let list = r.a.records(&r.task, r.clock.now()).unwrap();
    assert_eq!(
        list.iter().map(|x| x.request.as_str()).collect::<Vec<_>>(),
        [a.as_str(), b.as_str()]
    );
    assert_eq!(list[0].waiting_ms, 6000);
    assert_eq!(list[1].waiting_ms, 1000);
    assert_eq!(list[0].options, ["allow_always", "allow", "reject"]);
    assert_eq!(list[0].title, "Run cargo test");
    assert_eq!(list[0].tool_kind.as_deref(), Some("execute"));
    assert_eq!(list[0].expires_at, "2026-11-18T11:16:40.000Z");
    assert!(r.a.records(&r.other, r.clock.now()).is_none());
}

#[test]
fn approvers_off_the_roster_are_dropped() {
    let mut r = Rig::new(ApprovalSettings {
        approvers: vec!["lead".into(), "gone".into()],
        ..settings()
    });
    assert!(r.a.is_approver("gone"));
    assert_eq!(r.a.retain_approvers(|n| n != "gone"), ["gone"]);
    assert!(!r.a.is_approver("gone") && r.a.is_approver("lead"));
    let _ = r.facts();
}

#[test]
fn a_preapproved_request_is_audited_with_its_rule_and_held_by_nobody() {
    let task = TaskId::parse(TASK).unwrap();
    let c = Approvals::preapproved(&task, &ask(1), 0);
    assert_eq!(
        c.audit,
        vec![TaskAudit::RequestPreapproved {
            task: TASK.into(),
            request: request_id(&task, &ask(1)),
            rule: 1,
        }]
    );
    assert!(c.envelope.is_none() && c.store.is_empty());
}

/// Closed requests are remembered for their refusal up to `CLOSED_KEPT`, oldest forgotten.
#[test]
fn closed_requests_are_remembered_within_a_bound() {
    let mut r = Rig::new(ApprovalSettings {
        max_open_requests: 65_536,
        ..settings()
    });
    let (first, _) = r.held(ask(1));
    let task = r.task.clone();
    r.a.close_task(&task, Closed::Cancelled);
    for seq in 2..(CLOSED_KEPT as u32 + 2) {
        r.held(ask(seq));
        r.a.close_task(&task, Closed::Cancelled);
    }
    assert_eq!(r.a.closed.len(), CLOSED_KEPT);
    assert!(matches!(
        r.answer(Some(&first), "allow"),
        Err(AnswerRefusal::NoSuchRequest { .. })
    ));
}
