//! Approvals through the real binaries (issue 37 design §1, §2, §4, §5, §8; SPEC §16.1;
//! docs/delegation.md "Approvals"): a delegated `fake-acp-agent` asks, the hub holds the
//! request and mails it to the delegator as a `task_request` envelope, and an answer given
//! with `agent-hub task answer`, the MCP `task_answer` tool, the bare verb or `agent-hub top`
//! reaches the agent, which reports the option it got. Every trust boundary is attacked as a
//! hostile party would: another roster agent, the task's own identity, a changed or a stale
//! request id, an option never offered, an answer after the expiry. The timeouts' fallbacks
//! (both), a cancel while a request waits, a restart with one open (SQLite), pre-approval
//! inside and outside the operator's bound, the hub-wide cap, and the approvers' roster
//! check at start are the hub's own. Every wait is an await, a read with a deadline or a log
//! poll, never a sleep.

use crate::delegate::{manifest, outcome, status, task_id, verb};
use crate::harness::{hello_line, token_of, Hub, Setup, CLIENT, OK};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Duration;

/// The fake agent's scenarios these tests delegate to, by manifest name.
const AGENTS: [(&str, &[&str]); 5] = [
    ("fakeask", &["ask", "claude-current"]),
    ("fakegemini", &["ask", "gemini"]),
    ("faketwice", &["ask_twice"]),
    ("fakeedit", &["ask_edit", "src/lib.rs"]),
    ("fakeeditout", &["ask_edit", "docs/notes.md"]),
];

/// A hub with `[tasks]` (`extra` appended to the table) and the agents above.
fn setup(extra: &str, sqlite: bool) -> Setup {
    let mut setup = Setup::new();
    if sqlite {
        setup = setup.with_sqlite_store(1 << 30);
    }
    std::fs::create_dir_all(setup.path("work/src")).unwrap();
    std::fs::create_dir_all(setup.path("manifests")).unwrap();
    for (name, scenario) in AGENTS {
        std::fs::write(
            setup.path(&format!("manifests/{name}.toml")),
            manifest(name, scenario),
        )
        .unwrap();
    }
    let tasks = tasks_section(&setup, extra);
    setup.config_text = Some(format!("{}{tasks}", setup.generated_config()));
    setup
}

fn tasks_section(setup: &Setup, extra: &str) -> String {
    let root = std::fs::canonicalize(setup.path("work")).unwrap();
    format!(
        "\n[tasks]\ncwd_roots = [{:?}]\nmanifests_dir = {:?}\ncredentials_dir = {:?}\n{extra}\n",
        root.to_str().unwrap(),
        setup.path("manifests").to_str().unwrap(),
        setup.path("task-creds").to_str().unwrap(),
    )
}

pub(crate) fn hub(extra: &str) -> Hub {
    setup(extra, false).start()
}

fn work(hub: &Hub) -> PathBuf {
    std::fs::canonicalize(hub.setup.path("work")).unwrap()
}

pub(crate) fn delegate(hub: &Hub, from: &str, agent: &str, extra: Value) -> String {
    let mut req = json!({"agent": agent, "cwd": work(hub), "prompt": "do the thing"});
    for (k, v) in extra.as_object().unwrap() {
        req[k] = v.clone();
    }
    task_id(&verb(hub, from, &json!({ "delegate": req })))
}

/// Waits (a parked await with a deadline) for the next `task_request` envelope of `task`;
/// returns its body after checking that the hub wrote it to `to`.
pub(crate) fn await_request(hub: &Hub, to: &str, task: &str) -> Value {
    let mut r = hub.raw();
    r.stream()
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    r.write(&format!(
        "{}{}\n",
        hello_line(to, token_of(to)),
        json!({"await": {"replyTo": task, "kind": "task_request", "timeoutSecs": 60}})
    ));
    r.expect_line(OK);
    let reply = r.json();
    let env = reply
        .get("envelope")
        .unwrap_or_else(|| panic!("expected a task_request envelope, got {reply}"))
        .clone();
    assert_eq!(env["from"], "hub", "{env}");
    assert_eq!(env["to"], to, "{env}");
    assert_eq!(env["kind"], "task_request", "{env}");
    assert_eq!(env["correlationId"], task, "{env}");
    env["body"].clone()
}

/// `agent-hub task answer --as NAME --token-file … --port … REST…`.
pub(crate) fn task_cli(hub: &Hub, name: &str, rest: &[&str]) -> crate::harness::Output {
    let mut cmd = std::process::Command::new(CLIENT);
    cmd.args(["task", "answer", "--as", name, "--token-file"])
        .arg(hub.token_file(name))
        .args(["--port", &hub.port.to_string()])
        .args(rest)
        .current_dir(hub.setup.path("cwd"));
    crate::harness::run(cmd, None)
}

/// Restarts a stopped hub on its port, its config written again with the port pinned (the
/// task identities' MCP servers and the test's clients find it there).
fn restart(hub: &mut Hub) {
    hub.setup.port = hub.port;
    let text = format!(
        "{}{}",
        hub.setup.generated_config(),
        tasks_section(&hub.setup, "")
    );
    hub.setup.config_text = Some(text);
    hub.restart();
}

/// `task_answer` as `name` over the bare verb: the hub's reply line.
fn answer(hub: &Hub, name: &str, task: &str, request: Option<&str>, option: &str) -> Value {
    let mut a = json!({"task": task, "option": option});
    if let Some(r) = request {
        a["request"] = json!(r);
    }
    verb(hub, name, &json!({ "task_answer": a }))
}

pub(crate) fn refusal(reply: &Value) -> String {
    reply["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("expected a refusal, got {reply}"))
        .to_owned()
}

pub(crate) fn events<'a>(audit: &'a [Value], event: &str, task: &str) -> Vec<&'a Value> {
    audit
        .iter()
        .filter(|r| r["event"] == event && r["task"] == task)
        .collect()
}

/// The delegator answers with `agent-hub task answer`: the envelope says what is asked and
/// how to answer, the CLI prints what was answered, and the agent reports the option it got
/// (it ran the command). The audit log holds the open and the answer, metadata only.
#[test]
fn the_delegator_answers_with_the_cli_and_the_agent_gets_that_option() {
    let hub = hub("");
    let task = delegate(&hub, "alpha", "fakeask", json!({}));
    let body = await_request(&hub, "alpha", &task);
    let request = body["request"].as_str().unwrap().to_owned();
    assert_eq!(body["state"], "open");
    assert_eq!(body["type"], "permission");
    assert_eq!(body["agent"], "fakeask");
    assert_eq!(body["toolCall"]["id"], "toolu_fake_1");
    assert_eq!(body["toolCall"]["kind"], "execute");
    assert_eq!(body["toolCall"]["command"], "echo fake > proof.txt");
    assert_eq!(
        body["answer"],
        format!("agent-hub task answer --id {task} --request {request} --option OPTION")
    );
    let offered: Vec<&str> = body["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["optionId"].as_str().unwrap())
        .collect();
    assert_eq!(offered, ["allow-once", "allow-with-updates", "reject"]);
    // The record lists it while it waits.
    let rec = status(&hub, "alpha", &task);
    assert_eq!(rec["requests"][0]["request"], request.as_str(), "{rec}");
    assert_eq!(rec["requests"][0]["options"][2], "reject");
    let out = task_cli(
        &hub,
        "alpha",
        &[
            "--id",
            &task,
            "--request",
            &request,
            "--option",
            "allow-once",
        ],
    );
    out.assert_code(0);
    assert_eq!(
        out.stdout.trim_end(),
        format!("answered {request} with allow-once")
    );
    let done = outcome(&hub, "alpha", &task);
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["text"], "asked: allow-once; ran");
    let audit = hub.audit();
    let opened = events(&audit, "request_opened", &task);
    assert_eq!(opened.len(), 1);
    assert_eq!(opened[0]["request"], request.as_str());
    assert_eq!(opened[0]["type"], "permission");
    assert_eq!(opened[0]["tool_kind"], "execute");
    let answered = events(&audit, "request_answered", &task);
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0]["by"], "alpha");
    assert_eq!(answered[0]["option"], "allow-once");
    // Metadata only in the request records (the envelope itself is audited as every
    // accepted envelope is, SPEC §8.1).
    for r in audit
        .iter()
        .filter(|r| r["event"].as_str().unwrap().starts_with("request_"))
    {
        assert!(!r.to_string().contains("proof.txt"), "{r}");
    }
}

/// A model answers through `agent-hub mcp`: the `await` tool wakes on the `task_request`
/// (reply-to the task), `task_answer` answers the one open request without naming it, and
/// the agent (Gemini's options here) gets what the model chose.
#[test]
fn a_model_answers_through_the_mcp_tools() {
    let hub = hub("");
    let task = delegate(&hub, "alpha", "fakegemini", json!({}));
    let call = |id: u64, tool: &str, args: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": args}})
        .to_string()
    };
    let input = [
        json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}).to_string(),
        call(1, "await", json!({"replyTo": task, "kind": "task_request", "timeoutSecs": 60})),
        call(2, "task_answer", json!({"task": task, "option": "proceed_once"})),
        call(3, "task_status", json!({"task": task})),
    ]
    .join("\n")
        + "\n";
    let mut c = hub.cli_command("mcp", "alpha", &[]);
    c.stdin(std::process::Stdio::piped());
    let out = crate::harness::run(c, Some(input.as_bytes()));
    out.assert_code(0);
    let replies: Vec<Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(replies.len(), 4, "{}", out.stdout);
    let text = |i: usize| {
        replies[i]["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(replies[1]["result"]["isError"], false, "{}", text(1));
    assert!(text(1).contains("\"kind\":\"task_request\""), "{}", text(1));
    assert_eq!(replies[2]["result"]["isError"], false, "{}", text(2));
    let answered: Value = serde_json::from_str(&text(2)).unwrap();
    assert_eq!(answered["option"], "proceed_once");
    assert_eq!(answered["state"], "answered");
    let done = outcome(&hub, "alpha", &task);
    assert_eq!(done["text"], "asked: proceed_once; ran", "{done}");
}

/// Design §5: a name in `tasks.approvers` sees another delegator's task while it has an
/// open request (`tasks`, `task_status`) and answers it; a roster agent that is neither the
/// delegator nor an approver sees nothing and may answer nothing, with the same words as for
/// a task that does not exist.
#[test]
fn an_approver_answers_another_delegators_request_and_nobody_else_may() {
    let hub = hub("approvers = [\"beta\"]");
    let task = delegate(&hub, "alpha", "fakeask", json!({}));
    let body = await_request(&hub, "alpha", &task);
    let request = body["request"].as_str().unwrap();
    let listed = verb(&hub, "beta", &json!({"tasks": {}}));
    let tasks = listed["tasks"]["tasks"].as_array().unwrap();
    assert_eq!(tasks.len(), 1, "{listed}");
    assert_eq!(tasks[0]["task"], task.as_str());
    assert_eq!(tasks[0]["requests"][0]["request"], request);
    assert_eq!(status(&hub, "gamma", &task)["state"], "unknown");
    assert_eq!(
        refusal(&answer(&hub, "gamma", &task, Some(request), "allow-once")),
        "unknown task"
    );
    let ok = answer(&hub, "beta", &task, Some(request), "reject");
    assert_eq!(ok["task_answer"]["state"], "answered", "{ok}");
    assert_eq!(ok["task_answer"]["request"], request);
    let done = outcome(&hub, "alpha", &task);
    assert_eq!(done["text"], "asked: reject; not run", "{done}");
    let audit = hub.audit();
    assert_eq!(events(&audit, "request_answered", &task)[0]["by"], "beta");
    // Once answered, the approver no longer sees alpha's task.
    assert_eq!(status(&hub, "beta", &task)["state"], "unknown");
}

/// Hostile answerers: the task's own identity approving its own request (with its real
/// token), a request id with one digit changed, another task's request named under this
/// one, an option the agent never offered, and the same answer twice. Each is refused in
/// SPEC §16.1's words and none reaches the agent, which gets only the delegator's answers.
#[test]
fn hostile_answers_are_refused_and_never_reach_the_agent() {
    let hub = hub("");
    let task = delegate(&hub, "alpha", "faketwice", json!({}));
    let first = await_request(&hub, "alpha", &task);
    let second = await_request(&hub, "alpha", &task);
    let (a, b) = (
        first["request"].as_str().unwrap().to_owned(),
        second["request"].as_str().unwrap().to_owned(),
    );
    // The task's own agent, with the token the hub gave it, answers its own request.
    let token_path = hub.setup.path(&format!("task-creds/{task}/token"));
    let token = std::fs::read_to_string(&token_path).unwrap();
    let mut r = hub.raw();
    r.write(&format!(
        "{}{}\n",
        hello_line(&task, token.trim()),
        json!({"task_answer": {"task": task, "request": a, "option": "allow"}})
    ));
    r.expect_line(OK);
    assert_eq!(r.error(), "unknown task");
    // Several open: one must be named.
    assert_eq!(
        refusal(&answer(&hub, "alpha", &task, None, "allow")),
        format!("invalid task_answer: {task} has 2 open requests; name one with request")
    );
    let mut changed = a.clone();
    let last = changed.pop().unwrap();
    changed.push(if last == '0' { '1' } else { '0' });
    assert_eq!(
        refusal(&answer(&hub, "alpha", &task, Some(&changed), "allow")),
        format!("invalid task_answer: {task} has no request {changed}")
    );
    assert_eq!(
        refusal(&answer(&hub, "alpha", &task, Some(&a), "allow_everything")),
        format!("invalid task_answer: option \"allow_everything\" was not offered (offered: allow_always, allow, reject)")
    );
    // Another task of alpha's, with its own request: not this task's.
    let other = delegate(&hub, "alpha", "fakeask", json!({}));
    let foreign = await_request(&hub, "alpha", &other)["request"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        refusal(&answer(&hub, "alpha", &task, Some(&foreign), "allow-once")),
        format!("invalid task_answer: {task} has no request {foreign}")
    );
    // Refusals changed nothing: both still wait.
    assert_eq!(
        status(&hub, "alpha", &task)["requests"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let ok = answer(&hub, "alpha", &task, Some(&b), "reject");
    assert_eq!(ok["task_answer"]["state"], "answered", "{ok}");
    assert_eq!(
        refusal(&answer(&hub, "alpha", &task, Some(&b), "allow")),
        format!("invalid task_answer: request {b} is not open (answered)")
    );
    let ok = answer(&hub, "alpha", &task, None, "allow");
    assert_eq!(
        ok["task_answer"]["request"],
        a.as_str(),
        "the one left: {ok}"
    );
    let done = outcome(&hub, "alpha", &task);
    assert_eq!(done["text"], "first: reject, second: allow", "{done}");
    assert_eq!(
        refusal(&answer(&hub, "alpha", &task, Some(&a), "reject")),
        format!("invalid task_answer: request {a} is not open (answered)")
    );
    verb(&hub, "alpha", &json!({"cancel": {"task": other}}));
    outcome(&hub, "alpha", &other);
}

/// Design §4.5 `reject`: nobody answers within `permission_timeout_secs`, so the agent gets
/// its reject option and the delegator a second envelope saying so; an answer after that is
/// late and refused.
#[test]
fn an_unanswered_request_gets_the_reject_fallback_and_the_delegator_hears_it() {
    let hub = hub("permission_timeout_secs = 1");
    let task = delegate(&hub, "alpha", "fakeask", json!({}));
    let open = await_request(&hub, "alpha", &task);
    let request = open["request"].as_str().unwrap();
    let expired = await_request(&hub, "alpha", &task);
    assert_eq!(
        expired,
        json!({"task": task, "request": request, "state": "expired", "fallback": "reject", "reason": "no answer within 1 s"})
    );
    let done = outcome(&hub, "alpha", &task);
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["text"], "asked: reject; not run");
    assert_eq!(
        refusal(&answer(&hub, "alpha", &task, Some(request), "allow-once")),
        format!("invalid task_answer: request {request} is not open (expired)")
    );
    let audit = hub.audit();
    let rec = events(&audit, "request_expired", &task);
    assert_eq!(rec.len(), 1);
    assert_eq!(rec[0]["fallback"], "reject");
    assert_eq!(rec[0]["reason"], "no answer within 1 s");
}

/// Design §4.5 `cancel`: the unanswered request cancels the task as `task cancel` does, and
/// its outcome says which request nobody answered.
#[test]
fn under_the_cancel_fallback_an_unanswered_request_cancels_the_task() {
    let hub = hub("permission_timeout_secs = 1\npermission_fallback = \"cancel\"");
    let task = delegate(&hub, "alpha", "fakeask", json!({}));
    let request = await_request(&hub, "alpha", &task)["request"]
        .as_str()
        .unwrap()
        .to_owned();
    let expired = await_request(&hub, "alpha", &task);
    assert_eq!(expired["fallback"], "cancel");
    let done = outcome(&hub, "alpha", &task);
    assert_eq!(done["state"], "cancelled", "{done}");
    assert_eq!(
        done["reason"],
        format!("no answer to request {request} within 1 s")
    );
    assert_eq!(done["text"], "asked: cancelled; not run");
}

/// Design §4.3: the delegator's cancel closes the open request (`request_closed`,
/// `cancelled`); the agent is told `cancelled`; an answer afterwards says so.
#[test]
fn a_cancel_closes_the_open_request() {
    let hub = hub("");
    let task = delegate(&hub, "alpha", "fakeask", json!({}));
    let request = await_request(&hub, "alpha", &task)["request"]
        .as_str()
        .unwrap()
        .to_owned();
    let r = verb(&hub, "alpha", &json!({"cancel": {"task": task}}));
    assert_eq!(r["cancel"]["state"], "cancelling", "{r}");
    let done = outcome(&hub, "alpha", &task);
    assert_eq!(done["state"], "cancelled", "{done}");
    assert_eq!(done["text"], "asked: cancelled; not run");
    assert_eq!(
        refusal(&answer(&hub, "alpha", &task, Some(&request), "allow-once")),
        format!("invalid task_answer: request {request} is not open (cancelled)")
    );
    let audit = hub.audit();
    let closed = events(&audit, "request_closed", &task);
    assert_eq!(closed.len(), 1);
    assert_eq!(closed[0]["why"], "cancelled");
    assert_eq!(closed[0]["request"], request.as_str());
}

/// Design §4.6, with the SQLite store: the hub dies with a request open; the next start
/// closes it by the fallback (never an allow), mails the delegator the expiry with the
/// reason `hub restarted` before the task's `hub_restarted` outcome, and the row is gone, so
/// a second restart says nothing more.
#[test]
fn a_restart_closes_an_open_request_by_the_fallback_and_says_so() {
    let mut hub = setup("", true).start();
    let task = delegate(&hub, "alpha", "fakeask", json!({}));
    let request = await_request(&hub, "alpha", &task)["request"]
        .as_str()
        .unwrap()
        .to_owned();
    hub.kill();
    restart(&mut hub);
    // The open envelope may come again first: its delivery's removal had not been committed
    // when the hub died (at least once, SPEC §12.1).
    let mut expired = await_request(&hub, "alpha", &task);
    if expired["state"] == "open" {
        assert_eq!(expired["request"], request.as_str());
        expired = await_request(&hub, "alpha", &task);
    }
    assert_eq!(
        expired,
        json!({"task": task, "request": request, "state": "expired", "fallback": "reject", "reason": "hub restarted"})
    );
    let done = outcome(&hub, "alpha", &task);
    assert_eq!(done["state"], "hub_restarted", "{done}");
    let audit = hub.audit();
    let rec = events(&audit, "request_expired", &task);
    assert_eq!(rec.len(), 1);
    assert_eq!(rec[0]["reason"], "hub restarted");
    assert!(events(&audit, "request_answered", &task).is_empty());
    hub.wait_service_log("the restart's count", |log| {
        log.contains("1 requests left open by the last run")
    });
    hub.terminate();
    restart(&mut hub);
    hub.wait_service_log("the second start's count", |log| {
        log.contains("0 requests left open by the last run")
    });
    let audit = hub.audit();
    assert_eq!(events(&audit, "request_expired", &task).len(), 1, "once");
}

/// Design §1, §2 through `agent-hub delegate`: an edit under the rule's folder is allowed at
/// once and never mailed (audited `request_preapproved`); one outside it is held for the
/// delegator; a wider `--permission` and rules under a `reject` bound are refused before any
/// task exists.
#[test]
fn pre_approval_inside_the_rule_is_answered_at_once_and_outside_it_is_held() {
    let hub = hub("[tasks.agent_permission]\nfakegemini = \"reject\"");
    let cwd = work(&hub);
    let cwd = cwd.to_str().unwrap();
    let run = |agent: &str, more: &[&str]| {
        let mut args = vec!["--agent", agent, "--cwd", cwd, "--prompt", "edit it"];
        args.extend_from_slice(more);
        hub.cli("delegate", "alpha", &args)
    };
    let out = run("fakeedit", &["--allow", "read,edit:src"]);
    out.assert_code(0);
    let task = out.stdout.trim().to_owned();
    let done = outcome(&hub, "alpha", &task);
    assert_eq!(done["text"], "asked: allow-once", "{done}");
    let audit = hub.audit();
    let pre = events(&audit, "request_preapproved", &task);
    assert_eq!(pre.len(), 1);
    assert_eq!(pre[0]["rule"], 1);
    assert!(events(&audit, "request_opened", &task).is_empty());
    // Outside the rule's folder: held, and mailed.
    let out = run("fakeeditout", &["--allow", "edit:src"]);
    out.assert_code(0);
    let held = out.stdout.trim().to_owned();
    let body = await_request(&hub, "alpha", &held);
    assert_eq!(body["toolCall"]["kind"], "edit");
    assert_eq!(body["toolCall"]["paths"], json!(["docs/notes.md"]));
    let ok = answer(&hub, "alpha", &held, None, "reject");
    assert_eq!(ok["task_answer"]["state"], "answered", "{ok}");
    assert_eq!(outcome(&hub, "alpha", &held)["text"], "asked: reject");
    // Wider than the bound, and rules under reject: refused, no task.
    let out = run("fakeedit", &["--permission", "allow"]);
    out.assert_code(1);
    assert!(
        out.stderr.contains(
            "invalid delegate: permission \"allow\" is wider than this hub allows for fakeedit (ask)"
        ),
        "{}",
        out.stderr
    );
    let out = run("fakegemini", &["--allow", "read"]);
    out.assert_code(1);
    assert!(
        out.stderr.contains(
            "invalid delegate: the operator's permission for fakegemini is reject; allow rules cannot widen it"
        ),
        "{}",
        out.stderr
    );
    let list = verb(&hub, "alpha", &json!({"tasks": {}}));
    assert_eq!(
        list["tasks"]["tasks"].as_array().unwrap().len(),
        2,
        "{list}"
    );
}

/// A delegation narrower than the bound runs under it: `--permission reject` answers the
/// agent's request with its reject option at once, nothing is held or mailed.
#[test]
fn a_narrower_permission_is_what_the_task_runs_under() {
    let hub = hub("");
    let task = delegate(&hub, "alpha", "fakeask", json!({"permission": "reject"}));
    let done = outcome(&hub, "alpha", &task);
    assert_eq!(done["text"], "asked: reject; not run", "{done}");
    assert!(events(&hub.audit(), "request_opened", &task).is_empty());
}

/// Design §4.2: past `tasks.max_open_requests` hub-wide the next request is answered by
/// the fallback at once (`request_refused`), while the one held still waits for its answer.
#[test]
fn past_the_hub_wide_cap_a_request_gets_the_fallback_at_once() {
    let hub = hub("max_open_requests = 1");
    let task = delegate(&hub, "alpha", "faketwice", json!({}));
    let body = await_request(&hub, "alpha", &task);
    let request = body["request"].as_str().unwrap();
    hub.wait_audit("the refusal", |audit| {
        audit
            .iter()
            .any(|r| r["event"] == "request_refused" && r["task"] == task.as_str())
    });
    let refused = events(&hub.audit(), "request_refused", &task)
        .first()
        .map(|r| r["why"].clone());
    assert_eq!(refused, Some(json!("max_open_requests")));
    let ok = answer(&hub, "alpha", &task, Some(request), "allow");
    assert_eq!(ok["task_answer"]["state"], "answered", "{ok}");
    let done = outcome(&hub, "alpha", &task);
    assert_eq!(done["text"], "first: reject, second: allow", "{done}");
}

/// Design §5: `tasks.approvers` must name roster agents; a name that is not one stops the
/// start, named, and one removed by a roster reload is dropped (logged) and may no longer
/// answer.
#[test]
fn approvers_are_checked_against_the_roster() {
    let setup = setup("approvers = [\"beta\", \"nobody\"]", false);
    let out = setup.fails_at(
        "tasks",
        "tasks.approvers names \"nobody\", which is not on the roster",
    );
    assert_eq!(out.code, 1, "{}", out.stderr);
    let hub = hub("approvers = [\"beta\"]");
    let roster: String = crate::harness::AGENTS
        .iter()
        .filter(|(n, _)| *n != "beta")
        .map(|(n, t)| format!("{n} = \"{t}\"\n"))
        .collect();
    hub.setup
        .write_roster(&format!("[agents]\n{roster}"), 0o600);
    hub.signal(libc::SIGHUP);
    hub.wait_service_log("the approver dropped", |log| {
        log.contains("tasks.approvers: beta is no longer on the roster; dropped from the approvers")
    });
    let task = delegate(&hub, "alpha", "fakeask", json!({}));
    let request = await_request(&hub, "alpha", &task)["request"]
        .as_str()
        .unwrap()
        .to_owned();
    // beta is off the roster now: it cannot even log in, let alone answer.
    let mut r = hub.raw();
    r.write(&format!(
        "{}{}\n",
        hello_line("beta", token_of("beta")),
        json!({"task_answer": {"task": task, "request": request, "option": "allow-once"}})
    ));
    assert!(r.error().starts_with("authentication failed"));
    assert!(events(&hub.audit(), "request_answered", &task).is_empty());
    verb(&hub, "alpha", &json!({"cancel": {"task": task}}));
    outcome(&hub, "alpha", &task);
}
