//! Requests across hubs on a virtual clock (issue 37 design §7; `tasks::relayed`): two books,
//! `east` delegating a task to `west`, wired as the hubs wire them (every `ToPeer` handed to
//! the other book as a relay message, an `AnswerCommit` settled as its commit would be), and a
//! third peer, `mallory`, that only sends. Both halves are checked by what each book asks to
//! send, answer, commit and log.

use super::*;
use crate::acp::{OptionKind, RequestOption as AskOption};
use crate::relay::message::{
    Payload, RelayOption, RelayToolCall, TaskAnswer, TaskRequest, TaskRequestClosed,
};
use crate::tasks::approvals::{is_request_id, MIRROR_GRACE};
use crate::tasks::settings::ApprovalSettings;
use crate::wire::approval::TaskAnswerRequest;
use serde_json::json;

fn ask(seq: u32) -> RequestAsk {
    let opt = |id: &str, kind| AskOption {
        option_id: id.into(),
        name: format!("{id} it"),
        kind,
    };
    RequestAsk {
        seq,
        kind: RequestKind::Permission,
        tool_call_id: format!("call_{seq}"),
        title: "Run make".into(),
        tool_kind: Some("execute".into()),
        paths: vec!["src/a.rs".into()],
        command: Some("make".into()),
        message: None,
        schema: None,
        options: vec![
            opt("allow", OptionKind::AllowOnce),
            opt("reject", OptionKind::RejectOnce),
        ],
    }
}

/// One hub of the pair: its book, ids, and everything it did that is not a relay message.
struct Side {
    name: &'static str,
    book: TaskBook,
    ids: SeededIds,
    done: Vec<TaskAction>,
}

/// Two books linked over a relay, on one virtual clock.
struct Net {
    east: Side,
    west: Side,
    clock: Clock,
    msg: u64,
    /// Relay messages dropped on the way (`drop_to_east`), for a lost-message test.
    drop_to_east: bool,
}

fn settings(timeout_secs: u64) -> ApprovalSettings {
    ApprovalSettings {
        permission_timeout_secs: timeout_secs,
        ..ApprovalSettings::default()
    }
}

impl Net {
    /// `approvals`: whether the link agreed `task-approvals`.
    fn new(approvals: bool, east_settings: ApprovalSettings) -> Net {
        let east_cfg = BookConfig {
            approvals: east_settings,
            ..config()
        };
        let west_cfg = BookConfig {
            approvals: settings(600),
            ..config()
        };
        let mut west = TaskBook::new(west_cfg, ["codex".to_owned()], Vec::<String>::new());
        west.set_accept_from(["east".to_owned(), "mallory".to_owned()]);
        let mut net = Net {
            east: Side {
                name: "east",
                book: TaskBook::new(east_cfg, Vec::<String>::new(), ["west".to_owned()]),
                ids: SeededIds::new(5),
                done: Vec::new(),
            },
            west: Side {
                name: "west",
                book: west,
                ids: SeededIds::new(6),
                done: Vec::new(),
            },
            clock: Clock::new(),
            msg: 0,
            drop_to_east: false,
        };
        net.link(true, approvals);
        net
    }

    fn link(&mut self, up: bool, approvals: bool) {
        let now = self.clock.now();
        let terms = LinkTerms {
            agent_hub: true,
            approvals,
        };
        let e = &mut self.east;
        e.book.handle_peer_link("west", up, terms, now, &mut e.ids);
        let w = &mut self.west;
        w.book.handle_peer_link("east", up, terms, now, &mut w.ids);
        self.pump();
    }

    /// Moves relay messages between the books until neither has one; everything else each
    /// book asked for is kept in its `done`, an answer's commit settled as written.
    fn pump(&mut self) {
        loop {
            let now = self.clock.now();
            let mut moved = false;
            for from_east in [true, false] {
                let (from, to) = if from_east {
                    (&mut self.east, &mut self.west)
                } else {
                    (&mut self.west, &mut self.east)
                };
                let actions: Vec<TaskAction> =
                    std::iter::from_fn(|| from.book.poll_action()).collect();
                for a in actions {
                    match a {
                        TaskAction::ToPeer { payload, .. } => {
                            moved = true;
                            self.msg += 1;
                            if !from_east && self.drop_to_east {
                                continue;
                            }
                            let id = format!("m{}", self.msg);
                            to.book.handle_peer_message(
                                from.name,
                                &id,
                                payload,
                                now,
                                &mut to.ids,
                                &|_| false,
                            );
                        }
                        TaskAction::AnswerCommit {
                            commit,
                            request,
                            decision,
                        } => {
                            moved = true;
                            from.done.push(TaskAction::Commit(commit));
                            from.book.answer_settled(&request, true, Some(*decision));
                        }
                        other => from.done.push(other),
                    }
                }
            }
            if !moved {
                return;
            }
        }
    }

    /// East delegates a task to west; west accepts and starts it. Returns (east's id,
    /// west's id).
    fn delegate(&mut self) -> (TaskId, TaskId) {
        let now = self.clock.now();
        let req = DelegateRequest {
            agent: "codex".into(),
            cwd: "/srv/root/app".into(),
            prompt: "fix it".into(),
            peer: Some("west".into()),
            ..DelegateRequest::default()
        };
        let e = &mut self.east;
        let east_id = e.book.submit(req, "mneme", now, &mut e.ids).unwrap();
        e.book.start_ready(now, &mut e.ids);
        self.pump();
        let w = &mut self.west;
        w.book.start_ready(now, &mut w.ids);
        let acts: Vec<TaskAction> = std::iter::from_fn(|| w.book.poll_action()).collect();
        let west_id = acts
            .iter()
            .find_map(|a| match a {
                TaskAction::Start(s) => Some(s.task.clone()),
                _ => None,
            })
            .expect("west started the task");
        w.done.extend(acts);
        self.pump();
        (east_id, west_id)
    }

    /// West's agent asks (its runner's `TaskEvent::Request`).
    fn west_asks(&mut self, task: &TaskId, a: RequestAsk) {
        let now = self.clock.now();
        let w = &mut self.west;
        w.book
            .handle_event(task, TaskEvent::Request(a), now, &mut w.ids, &|_| false);
        self.pump();
    }

    fn tick(&mut self) {
        let now = self.clock.now();
        for s in [&mut self.east, &mut self.west] {
            s.book.handle_timeout(now, &mut s.ids, &|_| false);
        }
        self.pump();
    }

    /// `task_answer` on east, as `who`: the reply's request, or the refusal's text.
    fn east_answers(
        &mut self,
        who: &str,
        task: &TaskId,
        request: Option<&str>,
        option: &str,
    ) -> Result<String, String> {
        let req = TaskAnswerRequest {
            task: task.as_str().into(),
            request: request.map(str::to_owned),
            option: option.into(),
            message: None,
        };
        let r = match self.east.book.answer(&req, who) {
            Ok(taken) => {
                self.east.done.push(TaskAction::Commit(taken.commit));
                self.east
                    .book
                    .answer_settled(&taken.request, true, Some(taken.decision));
                Ok(taken.request)
            }
            Err(e) => Err(e.to_string()),
        };
        self.pump();
        r
    }

    /// A peer's message to west, as if it came over that peer's link.
    fn relay_to_west(&mut self, from: &str, payload: Payload) {
        let now = self.clock.now();
        self.msg += 1;
        let id = format!("x{}", self.msg);
        let w = &mut self.west;
        w.book
            .handle_peer_message(from, &id, payload, now, &mut w.ids, &|_| false);
        self.pump();
    }

    /// A peer's message to east.
    fn relay_to_east(&mut self, from: &str, payload: Payload) {
        let now = self.clock.now();
        self.msg += 1;
        let id = format!("x{}", self.msg);
        let e = &mut self.east;
        e.book
            .handle_peer_message(from, &id, payload, now, &mut e.ids, &|_| false);
        self.pump();
    }
}

/// The actions a side did since the last call.
fn take(s: &mut Side) -> Vec<TaskAction> {
    std::mem::take(&mut s.done)
}

fn runner_answers(actions: &[TaskAction]) -> Vec<(TaskId, u32, Option<String>)> {
    actions
        .iter()
        .filter_map(|a| match a {
            TaskAction::Answer { task, seq, answer } => {
                Some((task.clone(), *seq, answer.option_id.clone()))
            }
            _ => None,
        })
        .collect()
}

fn audit_records(actions: &[TaskAction]) -> Vec<&TaskAudit> {
    actions
        .iter()
        .filter_map(|a| match a {
            TaskAction::Commit(c) => Some(c.audit.iter()),
            _ => None,
        })
        .flatten()
        .collect()
}

fn events(actions: &[TaskAction]) -> Vec<&'static str> {
    audit_records(actions)
        .into_iter()
        .map(TaskAudit::event)
        .collect()
}

fn request_bodies(actions: &[TaskAction]) -> Vec<Value> {
    envelopes(actions, crate::wire::approval::TASK_REQUEST_KIND)
        .into_iter()
        .map(body)
        .collect()
}

fn logs(actions: &[TaskAction]) -> Vec<String> {
    actions
        .iter()
        .filter_map(|a| match a {
            TaskAction::Log(l) => Some(l.clone()),
            _ => None,
        })
        .collect()
}

fn store_ops(actions: &[TaskAction]) -> usize {
    actions
        .iter()
        .filter_map(|a| match a {
            TaskAction::Commit(c) => Some(c.store.len()),
            _ => None,
        })
        .sum()
}

/// The requests' ids the record of `task` lists as open on `side`.
fn open_requests(side: &Side, task: &TaskId, asker: &str, now: Now) -> Vec<String> {
    side.book
        .status(task.as_str(), asker, now)
        .requests
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.request)
        .collect()
}

/// Design §7: the worker's request reaches the delegator as the same envelope a local one
/// makes, its answer crosses back, and the worker applies it only after its commit.
#[test]
fn a_peer_tasks_request_reaches_the_delegator_and_its_answer_the_agent() {
    let mut n = Net::new(true, settings(600));
    let (east_id, west_id) = n.delegate();
    take(&mut n.east);
    take(&mut n.west);
    n.west_asks(&west_id, ask(1));
    let w = take(&mut n.west);
    assert_eq!(events(&w), ["request_opened"]);
    assert!(
        envelopes(&w, crate::wire::approval::TASK_REQUEST_KIND).is_empty(),
        "west mails no local envelope for a peer's task"
    );
    assert_eq!(
        store_ops(&w),
        1,
        "the worker keeps its request in the store"
    );
    let e = take(&mut n.east);
    assert_eq!(events(&e), ["request_opened"]);
    assert_eq!(store_ops(&e), 0, "a mirror is never stored");
    let bodies = request_bodies(&e);
    assert_eq!(bodies.len(), 1);
    let b = &bodies[0];
    let request = b["request"].as_str().unwrap().to_owned();
    assert!(is_request_id(&request));
    assert_eq!(b["task"], east_id.as_str(), "east's own task id");
    assert_eq!(b["state"], "open");
    assert_eq!(b["agent"], "codex");
    assert_eq!(b["toolCall"]["command"], "make");
    assert_eq!(b["toolCall"]["paths"], json!(["src/a.rs"]));
    assert_eq!(b["options"][0]["optionId"], "allow");
    assert_eq!(b["options"][0]["kind"], "allow_once");
    // The worker's expiry, as this hub's clock reads it (both here read one clock).
    assert_eq!(b["expiresAt"], "2026-11-18T11:16:40.000Z");
    let env = &envelopes(&e, crate::wire::approval::TASK_REQUEST_KIND)[0];
    assert_eq!(env.to, "mneme");
    assert_eq!(env.correlation_id.as_deref(), Some(east_id.as_str()));
    let now = n.clock.now();
    assert_eq!(
        open_requests(&n.east, &east_id, "mneme", now),
        std::slice::from_ref(&request)
    );

    assert_eq!(
        n.east_answers("mneme", &east_id, None, "allow"),
        Ok(request.clone())
    );
    let w = take(&mut n.west);
    assert_eq!(
        runner_answers(&w),
        [(west_id.clone(), 1, Some("allow".into()))]
    );
    let answered: Vec<&TaskAudit> = audit_records(&w)
        .into_iter()
        .filter(|a| a.event() == "request_answered")
        .collect();
    assert_eq!(answered.len(), 1);
    assert!(
        matches!(answered[0], TaskAudit::RequestAnswered { by, option, .. }
            if *by == format!("task-from:east:{east_id}") && option == "allow"),
        "{answered:?}"
    );
    // East recorded its delegator's answer; west told east it is answered, and east's
    // mirror closed already, so nothing more there.
    let e = take(&mut n.east);
    assert_eq!(events(&e), ["request_answered"]);
    assert_eq!(store_ops(&e), 0, "a mirror has no row to close");
    assert!(open_requests(&n.east, &east_id, "mneme", now).is_empty());
    // A second answer is refused on east, as for a local request.
    assert_eq!(
        n.east_answers("mneme", &east_id, Some(&request), "reject"),
        Err(format!(
            "invalid task_answer: request {request} is not open (answered)"
        ))
    );
}

/// Design §4b across hubs: a question's mirror offers the question's own option kinds
/// (`accept`, `decline`, `cancel`, never read as a permission's `reject_once`); east refuses
/// an `accept` without the form's content as it does a local one, and the content it accepts
/// reaches west's runner with the option.
#[test]
fn a_question_crosses_with_its_schema_and_its_content_comes_back() {
    let mut n = Net::new(true, settings(600));
    let (east_id, west_id) = n.delegate();
    take(&mut n.east);
    take(&mut n.west);
    let schema = r#"{"type":"object","properties":{"choice":{"type":"string"}}}"#;
    let mut q = ask(1);
    q.kind = RequestKind::Question;
    q.tool_kind = None;
    q.paths = Vec::new();
    q.command = None;
    q.message = Some("Which one?".into());
    q.schema = Some(schema.into());
    q.options = [
        ("accept", OptionKind::Accept),
        ("decline", OptionKind::Decline),
        ("cancel", OptionKind::Cancel),
    ]
    .into_iter()
    .map(|(id, kind)| AskOption {
        option_id: id.into(),
        name: id.into(),
        kind,
    })
    .collect();
    n.west_asks(&west_id, q);
    let e = take(&mut n.east);
    let bodies = request_bodies(&e);
    assert_eq!(bodies.len(), 1, "{e:?}");
    let b = &bodies[0];
    assert_eq!(b["type"], "question");
    assert_eq!(b["message"], "Which one?");
    assert_eq!(b["schema"], schema);
    let kinds: Vec<&str> = b["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["accept", "decline", "cancel"]);
    let request = b["request"].as_str().unwrap().to_owned();
    let mut req = TaskAnswerRequest {
        task: east_id.as_str().into(),
        request: Some(request.clone()),
        option: "accept".into(),
        message: None,
    };
    assert_eq!(
        n.east
            .book
            .answer(&req, "mneme")
            .err()
            .map(|e| e.to_string()),
        Some(
            "invalid task_answer: accept needs message to hold the form's content as a JSON object"
                .into()
        )
    );
    req.message = Some(r#"{"choice":"b"}"#.into());
    let taken = n.east.book.answer(&req, "mneme").unwrap();
    n.east
        .book
        .answer_settled(&taken.request, true, Some(taken.decision));
    n.pump();
    let w = take(&mut n.west);
    let got: Vec<(&TaskId, u32, &RequestAnswer)> = w
        .iter()
        .filter_map(|a| match a {
            TaskAction::Answer { task, seq, answer } => Some((task, *seq, answer)),
            _ => None,
        })
        .collect();
    assert_eq!(got.len(), 1, "{w:?}");
    assert_eq!(got[0].0, &west_id);
    assert_eq!(got[0].2.option_id.as_deref(), Some("accept"));
    assert_eq!(got[0].2.message.as_deref(), Some(r#"{"choice":"b"}"#));
}

/// Design §7: the worker is the only clock. Its expiry answers its agent with its fallback
/// and closes the mirror with the worker's words; the mirror never expires first.
#[test]
fn the_worker_is_the_only_clock_and_its_expiry_reaches_the_delegator() {
    let mut n = Net::new(true, settings(5));
    let (east_id, west_id) = n.delegate();
    n.west_asks(&west_id, ask(1));
    take(&mut n.east);
    take(&mut n.west);
    n.clock.advance_secs(599);
    n.tick();
    assert!(
        events(&take(&mut n.east)).is_empty(),
        "east's own permission_timeout_secs (5) does not apply to a mirror"
    );
    assert!(runner_answers(&take(&mut n.west)).is_empty());
    n.clock.advance_secs(1);
    n.tick();
    let w = take(&mut n.west);
    assert_eq!(runner_answers(&w), [(west_id, 1, Some("reject".into()))]);
    let e = take(&mut n.east);
    assert_eq!(events(&e), ["request_expired"]);
    let b = &request_bodies(&e)[0];
    assert_eq!(b["state"], "expired");
    assert_eq!(b["fallback"], "reject");
    assert_eq!(b["reason"], "no answer within 600 s");
    assert!(open_requests(&n.east, &east_id, "mneme", n.clock.now()).is_empty());
    assert!(n
        .east_answers("mneme", &east_id, None, "allow")
        .unwrap_err()
        .contains("has no open request"));
}

/// A worker's close lost on the way: the mirror closes by itself `MIRROR_GRACE` after the
/// worker's expiry, tells the delegator, and sends the worker nothing.
#[test]
fn a_mirror_whose_close_is_lost_expires_after_the_grace_and_answers_nothing() {
    let mut n = Net::new(true, settings(600));
    let (east_id, west_id) = n.delegate();
    n.west_asks(&west_id, ask(1));
    take(&mut n.east);
    n.drop_to_east = true;
    n.clock.advance_secs(600);
    n.tick();
    take(&mut n.west);
    assert!(events(&take(&mut n.east)).is_empty());
    n.clock.advance_secs(MIRROR_GRACE.as_secs() - 1);
    n.tick();
    assert!(events(&take(&mut n.east)).is_empty());
    n.clock.advance_secs(1);
    let sent_before = n.msg;
    n.tick();
    let e = take(&mut n.east);
    assert_eq!(events(&e), ["request_expired"]);
    assert_eq!(request_bodies(&e)[0]["reason"], "no answer within 600 s");
    assert_eq!(n.msg, sent_before, "nothing crosses: the worker decided");
    assert!(open_requests(&n.east, &east_id, "mneme", n.clock.now()).is_empty());
}

/// Design §7: without the feature (claudectl, an older agent-hub, a link without
/// frame-mac) the worker answers by its fallback at once, audited with the reason.
#[test]
fn without_task_approvals_the_worker_falls_back_at_once() {
    let mut n = Net::new(false, settings(600));
    let (_east_id, west_id) = n.delegate();
    take(&mut n.east);
    take(&mut n.west);
    let sent_before = n.msg;
    n.west_asks(&west_id, ask(1));
    let w = take(&mut n.west);
    assert_eq!(runner_answers(&w), [(west_id, 1, Some("reject".into()))]);
    assert!(
        audit_records(&w).iter().any(|a| matches!(a,
            TaskAudit::RequestExpired { reason, fallback, .. }
                if reason == "no relay route to the delegator" && fallback == "reject")),
        "{:?}",
        audit_records(&w)
    );
    assert!(logs(&w)
        .iter()
        .any(|l| l.contains("not held (request_expired)")));
    assert_eq!(n.msg, sent_before, "nothing is sent to east");
    assert!(events(&take(&mut n.east)).is_empty());
}

/// A hostile peer cannot answer another peer's task, a request that is not open, or with
/// an option never offered: each is refused and logged on the worker, never applied, and
/// the request stays open for its own delegator.
#[test]
fn forged_and_wrong_answers_are_refused_by_the_worker() {
    let mut n = Net::new(true, settings(600));
    let (east_id, west_id) = n.delegate();
    n.west_asks(&west_id, ask(1));
    let e = take(&mut n.east);
    let request = request_bodies(&e)[0]["request"]
        .as_str()
        .unwrap()
        .to_owned();
    take(&mut n.west);
    let answer = |task: &str, request: &str, option: &str| {
        Payload::TaskAnswer(TaskAnswer {
            task_id: task.into(),
            request: request.into(),
            option: option.into(),
            message: None,
        })
    };
    // Mallory names east's task and the right request: not a task it delegated.
    n.relay_to_west("mallory", answer(east_id.as_str(), &request, "allow"));
    // East itself: a request west never had, an option never offered, a task id it did not
    // give, a malformed id.
    n.relay_to_west(
        "east",
        answer(east_id.as_str(), "req-00000000deadbeef", "allow"),
    );
    n.relay_to_west("east", answer(east_id.as_str(), &request, "allow_always"));
    n.relay_to_west(
        "east",
        answer("task-ffffffffffffffffffffffffffffffff", &request, "allow"),
    );
    n.relay_to_west("east", answer("../../etc", &request, "allow"));
    n.relay_to_west("east", answer(east_id.as_str(), &request, &"x".repeat(200)));
    let w = take(&mut n.west);
    assert!(runner_answers(&w).is_empty(), "nothing reached the agent");
    assert!(
        !events(&w).contains(&"request_answered"),
        "{:?}",
        events(&w)
    );
    let lines = logs(&w);
    assert!(
        lines
            .iter()
            .any(|l| l.contains("mallory sent a task_answer for a task it did not delegate")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("has no request req-00000000deadbeef")),
        "{lines:?}"
    );
    assert!(
        lines.iter().any(|l| l.contains("option \"allow_always\" was not offered (offered: allow, reject)")),
        "{lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("task_answer whose task_answer option is over its cap")),
        "{lines:?}"
    );
    assert!(
        lines.iter().all(|l| !l.contains(&"x".repeat(200))),
        "a peer's text is never logged"
    );
    // Still open, for east's delegator.
    assert_eq!(
        n.east_answers("mneme", &east_id, Some(&request), "reject"),
        Ok(request)
    );
    assert_eq!(
        runner_answers(&take(&mut n.west)),
        [(west_id, 1, Some("reject".into()))]
    );
}

/// A worker's `task_request` that names no task of ours at that peer, breaks a bound or
/// offers an option of no ACP kind is dropped and logged: no envelope, no mirror.
#[test]
fn hostile_task_requests_make_no_mirror() {
    let mut n = Net::new(true, settings(600));
    let (east_id, _west_id) = n.delegate();
    take(&mut n.east);
    let good = TaskRequest {
        task_id: east_id.as_str().into(),
        request: "req-0123456789abcdef".into(),
        kind: "permission".into(),
        tool_call: RelayToolCall {
            id: "c1".into(),
            title: "Run \u{1b}]52;c;evil\u{7} make".into(),
            kind: Some("execute".into()),
            paths: Vec::new(),
            command: None,
        },
        message: None,
        schema: None,
        options: vec![RelayOption {
            option_id: "ok".into(),
            name: "OK".into(),
            kind: "allow_once".into(),
        }],
        expires_at: u64::MAX,
    };
    let bad = |f: &dyn Fn(&mut TaskRequest)| {
        let mut r = good.clone();
        f(&mut r);
        Payload::TaskRequest(r)
    };
    let cases: Vec<(&str, Payload)> = vec![
        ("another peer", Payload::TaskRequest(good.clone())),
        (
            "not our task",
            bad(&|r| r.task_id = "task-ffffffffffffffffffffffffffffffff".into()),
        ),
        ("request id", bad(&|r| r.request = "req-XYZ".into())),
        ("no options", bad(&|r| r.options.clear())),
        (
            "nine options",
            bad(&|r| {
                r.options = (0..9)
                    .map(|i| RelayOption {
                        option_id: format!("o{i}"),
                        name: "n".into(),
                        kind: "allow_once".into(),
                    })
                    .collect()
            }),
        ),
        ("twice", bad(&|r| r.options.push(r.options[0].clone()))),
        ("kind", bad(&|r| r.options[0].kind = "allow_forever".into())),
        ("type", bad(&|r| r.kind = "order".into())),
        ("title", bad(&|r| r.tool_call.title = "t".repeat(257))),
    ];
    for (name, p) in cases {
        let from = if name == "another peer" {
            "mallory"
        } else {
            "west"
        };
        n.relay_to_east(from, p);
        let e = take(&mut n.east);
        assert!(events(&e).is_empty(), "{name}: {:?}", events(&e));
        assert_eq!(logs(&e).len(), 1, "{name}: {:?}", logs(&e));
    }
    // The good one is mirrored, its title made safe for a terminal, its wait bounded.
    n.relay_to_east("west", Payload::TaskRequest(good));
    let e = take(&mut n.east);
    assert_eq!(events(&e), ["request_opened"]);
    let b = &request_bodies(&e)[0];
    assert_eq!(b["toolCall"]["title"], "Run ?]52;c;evil? make");
    assert_eq!(b["expiresAt"], "2026-11-19T11:06:40.000Z", "at most a day");
}

/// A question's form crosses with it: the worker's `task_request` carries the schema and the
/// delegator's envelope shows it, so an accept can be written to it; a schema on a
/// permission, not a JSON object's text or over its cap is dropped and logged.
#[test]
fn a_questions_schema_reaches_the_delegating_hubs_envelope() {
    let mut n = Net::new(true, settings(600));
    let (east_id, _west_id) = n.delegate();
    take(&mut n.east);
    let schema = r#"{"type":"object","properties":{"choice":{"type":"string"}}}"#;
    let q = TaskRequest {
        task_id: east_id.as_str().into(),
        request: "req-0123456789abcdef".into(),
        kind: "question".into(),
        tool_call: RelayToolCall {
            id: "q1".into(),
            title: "Which one?".into(),
            kind: None,
            paths: Vec::new(),
            command: None,
        },
        message: Some("Pick a or b".into()),
        schema: Some(schema.into()),
        options: ["accept", "decline", "cancel"]
            .iter()
            .map(|o| RelayOption {
                option_id: (*o).into(),
                name: (*o).into(),
                kind: (*o).into(),
            })
            .collect(),
        expires_at: u64::MAX,
    };
    let bad = |f: &dyn Fn(&mut TaskRequest)| {
        let mut r = q.clone();
        f(&mut r);
        Payload::TaskRequest(r)
    };
    let cases: Vec<(&str, Payload)> = vec![
        (
            "schema on a permission",
            bad(&|r| r.kind = "permission".into()),
        ),
        ("not json", bad(&|r| r.schema = Some("{not json".into()))),
        ("not an object", bad(&|r| r.schema = Some("[1,2]".into()))),
        (
            "over its cap",
            bad(&|r| r.schema = Some(format!(r#"{{"d":"{}"}}"#, "x".repeat(4096)))),
        ),
    ];
    for (name, p) in cases {
        n.relay_to_east("west", p);
        let e = take(&mut n.east);
        assert!(events(&e).is_empty(), "{name}: {:?}", events(&e));
        let l = logs(&e);
        assert!(l.len() == 1 && l[0].contains("schema"), "{name}: {l:?}");
    }
    n.relay_to_east("west", Payload::TaskRequest(q));
    let e = take(&mut n.east);
    assert_eq!(events(&e), ["request_opened"], "{:?}", logs(&e));
    let b = &request_bodies(&e)[0];
    assert_eq!(b["type"], "question", "{b}");
    assert_eq!(b["schema"], schema, "{b}");
}

/// A dropped link: the answer is refused while no link carries it (the request stays open
/// on both hubs), and the new link sends the open request again, mirrored once.
#[test]
fn a_dropped_link_keeps_the_request_and_the_new_link_carries_the_answer() {
    let mut n = Net::new(true, settings(600));
    let (east_id, west_id) = n.delegate();
    n.west_asks(&west_id, ask(1));
    let request = request_bodies(&take(&mut n.east))[0]["request"]
        .as_str()
        .unwrap()
        .to_owned();
    n.link(false, false);
    assert_eq!(
        n.east_answers("mneme", &east_id, None, "allow"),
        Err("invalid task_answer: the task runs on west, which is not linked now; answer again once it is (the request waits there until it expires)".into())
    );
    assert_eq!(
        open_requests(&n.east, &east_id, "mneme", n.clock.now()),
        std::slice::from_ref(&request)
    );
    let sent_before = n.msg;
    n.link(true, true);
    assert_eq!(n.msg, sent_before + 1, "west sent its open request again");
    let e = take(&mut n.east);
    assert!(events(&e).is_empty(), "mirrored once: {:?}", events(&e));
    assert_eq!(
        n.east_answers("mneme", &east_id, None, "allow"),
        Ok(request)
    );
    assert_eq!(
        runner_answers(&take(&mut n.west)),
        [(west_id, 1, Some("allow".into()))]
    );
}

/// West's approver answers a peer's task's request there; east's mirror closes `answered`
/// (no answer of its own goes out). A task that ends on west closes what is left, and the
/// delegating side's cancel closes its mirrors at once.
#[test]
fn closes_on_the_worker_close_the_mirror() {
    let mut n = Net::new(true, settings(600));
    let (east_id, west_id) = n.delegate();
    n.west_asks(&west_id, ask(1));
    n.west_asks(&west_id, ask(2));
    let e = take(&mut n.east);
    let reqs: Vec<String> = request_bodies(&e)
        .iter()
        .map(|b| b["request"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(reqs.len(), 2);
    // Worker side: the peer's task's delegator is the peer; its own approver answers one.
    n.relay_to_west(
        "east",
        Payload::TaskAnswer(TaskAnswer {
            task_id: east_id.as_str().into(),
            request: reqs[0].clone(),
            option: "reject".into(),
            message: None,
        }),
    );
    // (East forwarded nothing itself: the mirror learns from west.)
    let e = take(&mut n.east);
    assert!(
        audit_records(&e).iter().any(|a| matches!(a,
            TaskAudit::RequestClosed { request, why, .. } if *request == reqs[0] && why == "answered")),
        "{:?}",
        audit_records(&e)
    );
    assert_eq!(
        open_requests(&n.east, &east_id, "mneme", n.clock.now()),
        [reqs[1].clone()]
    );
    // East cancels: its mirror closes `cancelled` in the cancelling commit.
    let now = n.clock.now();
    let ee = &mut n.east;
    assert_eq!(
        ee.book
            .cancel(east_id.as_str(), "mneme", now, &mut ee.ids)
            .state,
        "cancelling"
    );
    n.pump();
    let e = take(&mut n.east);
    assert!(
        audit_records(&e).iter().any(|a| matches!(a,
            TaskAudit::RequestClosed { request, why, .. } if *request == reqs[1] && why == "cancelled")),
        "{:?}",
        audit_records(&e)
    );
    // West got the stop: its session answers the agent `cancelled`; the book closed the
    // request with the cancel and told east, whose mirror is closed already.
    let w = take(&mut n.west);
    assert!(w
        .iter()
        .any(|a| matches!(a, TaskAction::Cancel(t) if *t == west_id)));
    assert!(audit_records(&w).iter().any(|a| matches!(a,
        TaskAudit::RequestClosed { request, why, .. } if *request == reqs[1] && why == "cancelled")));
}

/// Past east's hub-wide cap a mirror is refused as a local request is: the worker is sent
/// the reject option at once (never an allow), and the delegator nothing.
#[test]
fn a_mirror_past_the_cap_gets_the_reject_option() {
    let mut n = Net::new(
        true,
        ApprovalSettings {
            max_open_requests: 1,
            ..settings(600)
        },
    );
    let (_east_id, west_id) = n.delegate();
    take(&mut n.east);
    n.west_asks(&west_id, ask(1));
    assert_eq!(events(&take(&mut n.east)), ["request_opened"]);
    take(&mut n.west);
    n.west_asks(&west_id, ask(2));
    let e = take(&mut n.east);
    assert_eq!(events(&e), ["request_refused"]);
    assert!(request_bodies(&e).is_empty());
    assert_eq!(
        runner_answers(&take(&mut n.west)),
        [(west_id, 2, Some("reject".into()))]
    );
}

/// A `task_request_closed` that is not one the hub sends is dropped; one about another task
/// or request changes nothing.
#[test]
fn hostile_closes_change_nothing() {
    let mut n = Net::new(true, settings(600));
    let (east_id, west_id) = n.delegate();
    n.west_asks(&west_id, ask(1));
    take(&mut n.east);
    let now = n.clock.now();
    let req = open_requests(&n.east, &east_id, "mneme", now)[0].clone();
    let close = |task: &str, request: &str, state: &str, reason: Option<&str>| {
        Payload::TaskRequestClosed(TaskRequestClosed {
            task_id: task.into(),
            request: request.into(),
            state: state.into(),
            reason: reason.map(str::to_owned),
            fallback: Some("reject".into()),
        })
    };
    n.relay_to_east("mallory", close(east_id.as_str(), &req, "cancelled", None));
    n.relay_to_east(
        "west",
        close(east_id.as_str(), &req, "expired", Some("because")),
    );
    n.relay_to_east("west", close(east_id.as_str(), &req, "vanished", None));
    n.relay_to_east(
        "west",
        close(east_id.as_str(), "req-0000000000000000", "cancelled", None),
    );
    let e = take(&mut n.east);
    assert!(events(&e).is_empty(), "{:?}", events(&e));
    assert_eq!(
        open_requests(&n.east, &east_id, "mneme", now),
        std::slice::from_ref(&req)
    );
    n.relay_to_east(
        "west",
        close(east_id.as_str(), &req, "expired", Some("hub restarted")),
    );
    let e = take(&mut n.east);
    assert_eq!(events(&e), ["request_expired"]);
    assert_eq!(request_bodies(&e)[0]["reason"], "hub restarted");
}
