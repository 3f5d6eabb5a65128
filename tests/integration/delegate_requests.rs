//! A delegated agent's questions through the real binaries (issue 37 design §1, §3, §4):
//! what the hub decides without the task book's approvals. The hub's own MCP server is
//! attached under the task's own name (`agent-hub-` + 12 hex of SHA-256(task id)) and its
//! tools are allowed under `reject` and under the default `ask` alike, in Claude's and
//! Gemini's forms, while a shell command titled like them is rejected; under `ask` a request
//! is held until the delegator's cancel closes it. Answering a held request through the hub
//! (`task_answer`), its envelope, expiry and restart are `approvals`' (the book's side).
//! Every wait is an await or a service-log poll with a deadline, never a sleep.

use crate::delegate::{manifest, outcome, task_id, verb};
use crate::harness::{Hub, Setup};
use agent_hub_proto::acp::permission::hub_server_name;
use serde_json::json;

/// A hub with `[tasks]` (extra keys appended) and one fake agent per scenario.
fn hub(extra: &str) -> Hub {
    let mut setup = Setup::new();
    std::fs::create_dir_all(setup.path("work")).unwrap();
    std::fs::create_dir_all(setup.path("manifests")).unwrap();
    for (name, scenario) in [
        ("fakeown", &["ask_own_tool", "claude", "call"][..]),
        ("fakeowngemini", &["ask_own_tool", "gemini", "call"][..]),
        ("fakeforged", &["ask_forged"][..]),
        ("fakeask", &["ask", "claude-current"][..]),
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

fn delegate(hub: &Hub, agent: &str) -> String {
    let cwd = std::fs::canonicalize(hub.setup.path("work")).unwrap();
    task_id(&verb(
        hub,
        "alpha",
        &json!({"delegate": {"agent": agent, "cwd": cwd, "prompt": "do the thing"}}),
    ))
}

/// Design §3: under `reject` and under the default `ask`, the agent's request for the hub's
/// own tool is allowed at once (nobody is asked), and the tool runs as the task identity.
/// The server's name is the task's own, so no configured server and no model output could
/// have named it in advance.
#[test]
fn the_hubs_own_tool_is_allowed_under_reject_and_ask_alike() {
    for (extra, policy) in [("permission = \"reject\"", "reject"), ("", "ask")] {
        let hub = hub(extra);
        for (agent, allow) in [("fakeown", "allow-once"), ("fakeowngemini", "proceed_once")] {
            let task = delegate(&hub, agent);
            let body = outcome(&hub, "alpha", &task);
            assert_eq!(body["state"], "completed", "{body}");
            let text = body["text"].as_str().unwrap();
            let server = hub_server_name(&task);
            assert!(
                text.starts_with(&format!("server {server}: asked: {allow}; tool whoami: ")),
                "{agent} under {policy}: {text}"
            );
            assert!(text.contains(&task), "whoami answered as the task: {text}");
            hub.wait_service_log("the own-tool line", |log| {
                log.contains(&format!(
                    "task {task}: permission asked for the hub's own tool whoami: allowed"
                ))
            });
        }
    }
}

/// A hostile model titles a shell command like the hub's tool (../notes capture §1.3):
/// nothing about it is the hub's, and under `reject` it is rejected.
#[test]
fn a_command_titled_like_the_hubs_tool_is_rejected_under_reject() {
    let hub = hub("permission = \"reject\"");
    let task = delegate(&hub, "fakeforged");
    let body = outcome(&hub, "alpha", &task);
    assert_eq!(body["state"], "completed", "{body}");
    assert_eq!(body["text"], "forged: reject", "{body}");
}

/// Under the default `ask`, a request nobody answers stays held (the agent waits, nothing
/// runs) until the delegator cancels the task; the session then answers it `cancelled`, as
/// ACP asks, and the task ends `cancelled`.
#[test]
fn under_ask_a_held_request_waits_until_the_task_is_cancelled() {
    let hub = hub("");
    let task = delegate(&hub, "fakeask");
    hub.wait_service_log("the held request", |log| {
        log.contains(&format!(
            "task {task}: permission asked for tool echo fake > proof.txt: held as request 1"
        ))
    });
    let r = verb(&hub, "alpha", &json!({"cancel": {"task": task}}));
    assert_eq!(r["cancel"]["state"], "cancelling", "{r}");
    let body = outcome(&hub, "alpha", &task);
    assert_eq!(body["state"], "cancelled", "{body}");
    assert_eq!(body["text"], "asked: cancelled; not run", "{body}");
    hub.wait_service_log("the close", |log| {
        log.contains(&format!(
            "task {task}: request 1: answered cancelled (the turn is being cancelled)"
        ))
    });
}
