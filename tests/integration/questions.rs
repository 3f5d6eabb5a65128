//! A delegated agent's questions through the real binaries (issue 37 design §4b; docs/acp.md
//! "Questions", docs/delegation.md "Answering"): `fake-acp-agent question` asks as Claude
//! Code's ACP adapter 0.101 does for its `AskUserQuestion` tool, only when the hub's
//! `initialize` advertised form elicitation. Under the default `ask` the form reaches the
//! delegator as a `task_request` of type `question` with its text, its schema and the
//! options `accept`, `decline`, `cancel`, and `agent-hub task answer --option accept
//! --message '{…}'` hands the agent the form's content. Attacked as a hostile party would:
//! an accept without content, another roster agent's answer, an agent that asks in url mode
//! or asks although nothing was advertised. Every wait is an await or a log poll with a
//! deadline, never a sleep.

use crate::approvals::await_request;
use crate::delegate::{manifest, outcome, status, task_id, verb};
use crate::harness::{Hub, Setup, CLIENT};
use serde_json::{json, Value};

/// A hub with `[tasks]` (`extra` appended) and the fake agent asking in each variant.
fn hub(extra: &str) -> Hub {
    let mut setup = Setup::new();
    std::fs::create_dir_all(setup.path("work")).unwrap();
    std::fs::create_dir_all(setup.path("manifests")).unwrap();
    for (name, scenario) in [
        ("fakequestion", &["question"][..]),
        ("fakeforce", &["question", "force"][..]),
        ("fakeurl", &["question", "url"][..]),
    ] {
        std::fs::write(
            setup.path(&format!("manifests/{name}.toml")),
            manifest(name, scenario),
        )
        .unwrap();
    }
    let root = std::fs::canonicalize(setup.path("work")).unwrap();
    let tasks = format!(
        "\n[tasks]\ncwd_roots = [{:?}]\nmanifests_dir = {:?}\ncredentials_dir = {:?}\n{extra}\n",
        root.to_str().unwrap(),
        setup.path("manifests").to_str().unwrap(),
        setup.path("task-creds").to_str().unwrap(),
    );
    setup.config_text = Some(format!("{}{tasks}", setup.generated_config()));
    setup.start()
}

fn delegate(hub: &Hub, agent: &str, extra: Value) -> String {
    let cwd = std::fs::canonicalize(hub.setup.path("work")).unwrap();
    let mut req = json!({"agent": agent, "cwd": cwd, "prompt": "ask me"});
    for (k, v) in extra.as_object().unwrap() {
        req[k] = v.clone();
    }
    task_id(&verb(hub, "alpha", &json!({ "delegate": req })))
}

/// `agent-hub task answer` as `name` with `rest`.
fn answer_cli(hub: &Hub, name: &str, rest: &[&str]) -> crate::harness::Output {
    let mut cmd = std::process::Command::new(CLIENT);
    cmd.args(["task", "answer", "--as", name, "--token-file"])
        .arg(hub.token_file(name))
        .args(["--port", &hub.port.to_string()])
        .args(rest);
    crate::harness::run(cmd, None)
}

fn requests_opened(hub: &Hub, task: &str) -> usize {
    hub.audit_events("request_opened")
        .iter()
        .filter(|r| r["task"] == task)
        .count()
}

/// Design §4b end to end: the question, its form and its options reach the delegator; an
/// accept without the form's content is refused (nothing reaches the agent, the question
/// stays open); `--message '{"choice":"b"}'` reaches the agent as the content, flat.
#[test]
fn a_question_reaches_the_delegator_and_the_cli_answers_it_with_the_forms_content() {
    let hub = hub("");
    let task = delegate(&hub, "fakequestion", json!({}));
    let body = await_request(&hub, "alpha", &task);
    let request = body["request"].as_str().unwrap().to_owned();
    assert_eq!(body["state"], "open");
    assert_eq!(body["type"], "question");
    assert_eq!(body["message"], "Which branch should I push to?");
    assert_eq!(
        body["toolCall"],
        json!({"id": "toolu_fake_q", "title": "Which branch should I push to?"}),
        "no tool kind, path or command for a question"
    );
    let schema: Value = serde_json::from_str(body["schema"].as_str().unwrap()).unwrap();
    assert_eq!(
        schema["properties"]["choice"]["enum"],
        json!(["a", "b"]),
        "the form as the agent sent it: {schema}"
    );
    let options: Vec<(&str, &str)> = body["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["optionId"].as_str().unwrap(), o["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        options,
        [
            ("accept", "accept"),
            ("decline", "decline"),
            ("cancel", "cancel")
        ]
    );
    let rec = status(&hub, "alpha", &task);
    assert_eq!(rec["requests"][0]["type"], "question", "{rec}");
    assert_eq!(
        rec["requests"][0]["title"],
        "Which branch should I push to?"
    );

    // Hostile or careless answers: refused, the question stays open.
    for (who, rest, want) in [
        (
            "alpha",
            vec!["--option", "accept"],
            "invalid task_answer: accept needs message to hold the form's content as a JSON object",
        ),
        (
            "alpha",
            vec!["--option", "accept", "--message", "b"],
            "invalid task_answer: accept needs message to hold the form's content as a JSON object",
        ),
        (
            "alpha",
            vec!["--option", "allow"],
            "invalid task_answer: option \"allow\" was not offered (offered: accept, decline, cancel)",
        ),
        ("beta", vec!["--option", "decline"], "unknown task"),
    ] {
        let mut args = vec!["--id", task.as_str()];
        args.extend(rest);
        let out = answer_cli(&hub, who, &args);
        out.assert_code(1);
        assert!(out.stderr.contains(want), "{who} {args:?}: {}", out.stderr);
    }
    assert_eq!(
        status(&hub, "alpha", &task)["requests"][0]["request"],
        request.as_str()
    );

    let out = answer_cli(
        &hub,
        "alpha",
        &[
            "--id",
            &task,
            "--option",
            "accept",
            "--message",
            r#"{"choice":"b"}"#,
        ],
    );
    out.assert_code(0);
    assert_eq!(
        out.stdout.trim_end(),
        format!("answered {request} with accept")
    );
    let done = outcome(&hub, "alpha", &task);
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["text"], r#"question: accept {"choice":"b"}"#);
    // The request records are metadata: the type and the option, never the text or the
    // content (the envelope itself is audited whole, as every accepted envelope is).
    let answered = hub.audit_events("request_answered");
    assert_eq!(answered.len(), 1);
    assert_eq!(answered[0]["option"], "accept");
    assert_eq!(hub.audit_events("request_opened")[0]["type"], "question");
    for r in hub.audit() {
        if r["event"].as_str().unwrap().starts_with("request_") {
            let text = r.to_string();
            assert!(
                !text.contains("Which branch") && !text.contains("choice"),
                "question text or content in {text}"
            );
        }
    }
    hub.wait_service_log("the question's lines", |log| {
        log.contains(&format!(
            "task {task}: question asked (elicitation/create): held as request 1"
        )) && log.contains(&format!(
            "task {task}: request 1: accepted (answered by the owner)"
        ))
    });
}

/// Decline reaches the agent as `decline`; a question nobody answers expires into the
/// question's own `cancel` (never an accept), and the delegator hears of it.
#[test]
fn decline_and_expiry_answer_without_content() {
    let hub = hub("");
    let task = delegate(&hub, "fakequestion", json!({}));
    let request = await_request(&hub, "alpha", &task)["request"]
        .as_str()
        .unwrap()
        .to_owned();
    let reply = verb(
        &hub,
        "alpha",
        &json!({"task_answer": {"task": task, "request": request, "option": "decline", "message": "{\"ignored\":1}"}}),
    );
    assert_eq!(reply["task_answer"]["state"], "answered", "{reply}");
    let done = outcome(&hub, "alpha", &task);
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["text"], "question: decline");

    let hub = self::hub("permission_timeout_secs = 1");
    let task = delegate(&hub, "fakequestion", json!({}));
    let open = await_request(&hub, "alpha", &task);
    let expired = await_request(&hub, "alpha", &task);
    assert_eq!(
        expired,
        json!({"task": task, "request": open["request"], "state": "expired", "fallback": "reject", "reason": "no answer within 1 s"})
    );
    let done = outcome(&hub, "alpha", &task);
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["text"], "question: cancel", "{done}");
}

/// Questions reach a person only under `ask`: under `reject` nothing is advertised and the
/// agent does not ask; one that asks anyway, or asks in url mode under `ask`, is declined at
/// once and nobody is mailed.
#[test]
fn nothing_is_asked_under_reject_and_url_mode_is_declined() {
    let hub = hub("");
    for (agent, extra, want) in [
        (
            "fakequestion",
            json!({"permission": "reject"}),
            "question: not advertised",
        ),
        (
            "fakeforce",
            json!({"permission": "reject"}),
            "question: decline",
        ),
        ("fakeurl", json!({}), "question: decline"),
    ] {
        let task = delegate(&hub, agent, extra.clone());
        let done = outcome(&hub, "alpha", &task);
        assert_eq!(done["state"], "completed", "{agent} {extra}: {done}");
        assert_eq!(done["text"], want, "{agent} {extra}");
        assert_eq!(requests_opened(&hub, &task), 0, "{agent}: nobody was asked");
        if agent == "fakeurl" {
            hub.wait_service_log("the url-mode line", |log| {
                log.contains(&format!("task {task}: question asked (elicitation/create), not carried: it is in url mode, which the hub does not offer (form only): declined"))
            });
        }
    }
    assert!(
        !std::fs::read_to_string(hub.service_log_path())
            .unwrap()
            .contains("example.invalid"),
        "the url never reaches a log"
    );
}
