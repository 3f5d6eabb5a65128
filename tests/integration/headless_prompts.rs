//! A headless task's permission prompts through the real binaries (issue 37 design §6; SPEC
//! §16.1; docs/delegation.md "Headless tasks" and "Approvals"): a manifest with
//! `run.headless_mcp` gets the MCP config file the hub writes into the task's folder, and
//! `fake-headless-agent ask` (crates/test-fakes/src/bin/fake-headless-agent.rs) calls the
//! `permission_prompt` tool of `agent-hub mcp` run as the task identity exactly as Claude
//! Code does. The delegator hears the request as a `task_request` envelope and answers with
//! `agent-hub task answer`; the allow, the deny with a message, the expiry, the cancel and the
//! hub's own tools (allowed by the MCP server itself) each reach the agent as Claude's JSON.
//! Attacked as a hostile party would: a roster agent and an ACP task sending the verb, the
//! task's own identity replaying a toolUseId and flooding past `max_open_requests_per_task`.
//! Every wait is an await, a read with a deadline or a log poll, never a sleep.

use crate::approvals::await_request;
use crate::delegate::{outcome, status, task_id, verb};
use crate::harness::{hello_line, token_of, Hub, Setup, CLIENT, OK};
use agent_hub_proto::acp::permission::hub_server_name;
use serde_json::{json, Value};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

/// A headless manifest for `fake-headless-agent ask WHAT {prompt}` with the built-in
/// claude's `run.headless_mcp` and its `[tools]` entry for Bash.
fn manifest(name: &str, what: &str) -> String {
    format!(
        r#"name = "{name}"
display = "Fake headless agent that asks ({name})"
binaries = ["fake-headless-agent"]

[observe]
sessions = "none"
transcript = "none"

[run]
acp = []
headless = [{agent:?}, "ask", "{what}", "{{prompt}}"]
headless_mcp = ["--mcp-config", "{{mcp_config}}", "--permission-prompt-tool", "mcp__{{server}}__permission_prompt"]
outcome = "claude-json"

[deliver]
mode = "pull"

[install]
mcp_config = ""
hook = "none"
skills_dir = ""

[tools]
Bash = "shell"
"#,
        agent = crate::common::fakes::headless_agent(),
    )
}

/// A hub with `[tasks]` (`extra` appended), the asking agents and an ACP one that holds a
/// request (for the hostile ACP task).
fn hub(extra: &str) -> Hub {
    let mut setup = Setup::new();
    std::fs::create_dir_all(setup.path("work")).unwrap();
    std::fs::create_dir_all(setup.path("manifests")).unwrap();
    for (name, what) in [("hlask", "bash"), ("hlown", "own")] {
        std::fs::write(
            setup.path(&format!("manifests/{name}.toml")),
            manifest(name, what),
        )
        .unwrap();
    }
    std::fs::write(
        setup.path("manifests/fakeask.toml"),
        crate::delegate::manifest("fakeask", &["ask", "claude-current"]),
    )
    .unwrap();
    let root = std::fs::canonicalize(setup.path("work")).unwrap();
    setup.config_text = Some(format!(
        "{}\n[tasks]\ncwd_roots = [{:?}]\nmanifests_dir = {:?}\ncredentials_dir = {:?}\n{extra}\n",
        setup.generated_config(),
        root.to_str().unwrap(),
        setup.path("manifests").to_str().unwrap(),
        setup.path("task-creds").to_str().unwrap(),
    ));
    setup.start()
}

fn work(hub: &Hub) -> PathBuf {
    std::fs::canonicalize(hub.setup.path("work")).unwrap()
}

fn delegate(hub: &Hub, agent: &str) -> String {
    task_id(&verb(
        hub,
        "alpha",
        &json!({"delegate": {"agent": agent, "cwd": work(hub), "prompt": "do the thing"}}),
    ))
}

/// `agent-hub task answer` as alpha.
fn answer_cli(hub: &Hub, rest: &[&str]) -> crate::harness::Output {
    let mut cmd = std::process::Command::new(CLIENT);
    cmd.args(["task", "answer", "--as", "alpha", "--token-file"])
        .arg(hub.token_file("alpha"))
        .args(["--port", &hub.port.to_string()])
        .args(rest)
        .current_dir(hub.setup.path("cwd"));
    crate::harness::run(cmd, None)
}

/// The task's own token, as its agent reads it from its folder.
fn task_token(hub: &Hub, task: &str) -> String {
    std::fs::read_to_string(hub.setup.path(&format!("task-creds/{task}/token")))
        .unwrap()
        .trim()
        .to_owned()
}

/// `task_permission` sent as `name` with `token`, on a connection of its own: the reply
/// line, read with a deadline (the hub parks the connection until the prompt is decided).
fn ask_as(hub: &Hub, name: &str, token: &str, tool_use_id: &str) -> Value {
    let mut r = hub.raw();
    r.stream()
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let line = json!({"task_permission": {"toolName": "Bash", "toolUseId": tool_use_id,
        "input": {"command": "rm -rf /"}}});
    r.write(&format!("{}{line}\n", hello_line(name, token)));
    r.expect_line(OK);
    r.json()
}

fn refusal(reply: &Value) -> String {
    reply["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("expected a refusal, got {reply}"))
        .to_owned()
}

/// The delegator allows with the CLI: the envelope says what Claude wants to run (the tool
/// name as title, its kind from the manifest's `[tools]`, the command from the input, the
/// options `allow` and `deny`), the agent gets `updatedInput` exactly as it sent the input and
/// runs it. The MCP config the hub wrote is private and names `agent-hub mcp` as the task
/// under its task-unique server name; it is gone with the task.
#[test]
fn the_delegator_allows_a_headless_bash_call_with_the_cli() {
    let hub = hub("");
    let task = delegate(&hub, "hlask");
    let body = await_request(&hub, "alpha", &task);
    let request = body["request"].as_str().unwrap().to_owned();
    assert_eq!(body["state"], "open", "{body}");
    assert_eq!(body["type"], "permission");
    assert_eq!(body["agent"], "hlask");
    assert_eq!(body["toolCall"]["id"], "toolu_fake_1");
    assert_eq!(body["toolCall"]["title"], "Bash");
    assert_eq!(body["toolCall"]["kind"], "execute");
    assert_eq!(body["toolCall"]["command"], "echo fake > proof.txt");
    let offered: Vec<(&str, &str)> = body["options"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["optionId"].as_str().unwrap(), o["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(offered, [("allow", "allow_once"), ("deny", "reject_once")]);
    // While it waits: the config file, mode 0600, in the task's own folder.
    let config = hub.setup.path(&format!("task-creds/{task}/mcp.json"));
    assert_eq!(
        std::fs::metadata(&config).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    let server = hub_server_name(&task);
    let entry = &doc["mcpServers"][server.as_str()];
    assert_eq!(entry["command"], CLIENT, "{doc}");
    let args: Vec<&str> = entry["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(&args[..3], ["mcp", "--as", task.as_str()], "{doc}");
    assert_eq!(doc["mcpServers"].as_object().unwrap().len(), 1, "{doc}");
    let rec = status(&hub, "alpha", &task);
    assert_eq!(rec["requests"][0]["request"], request.as_str(), "{rec}");
    let out = answer_cli(
        &hub,
        &["--id", &task, "--request", &request, "--option", "allow"],
    );
    out.assert_code(0);
    assert_eq!(
        out.stdout.trim_end(),
        format!("answered {request} with allow")
    );
    let done = outcome(&hub, "alpha", &task);
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(done["text"], "asked: allow; ran", "{done}");
    assert_eq!(
        std::fs::read_to_string(work(&hub).join("proof.txt")).unwrap(),
        "echo fake > proof.txt",
        "updatedInput is the input as the agent sent it"
    );
    let audit = hub.audit();
    assert!(audit.iter().any(|r| r["event"] == "request_answered"
        && r["task"] == task.as_str()
        && r["option"] == "allow"));
    crate::harness::poll_until("the task's folder to go", || {
        (!config.exists()).then_some(())
    });
}

/// A deny with a message reaches the model verbatim, and nothing runs.
#[test]
fn a_deny_with_a_message_reaches_the_agent_and_nothing_runs() {
    let hub = hub("");
    let task = delegate(&hub, "hlask");
    let body = await_request(&hub, "alpha", &task);
    let request = body["request"].as_str().unwrap().to_owned();
    let out = answer_cli(
        &hub,
        &[
            "--id",
            &task,
            "--request",
            &request,
            "--option",
            "deny",
            "--message",
            "use make clean instead",
        ],
    );
    out.assert_code(0);
    let done = outcome(&hub, "alpha", &task);
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(
        done["text"], "asked: deny: use make clean instead; not run",
        "{done}"
    );
    assert!(!work(&hub).join("proof.txt").exists());
}

/// Nobody answers: at the expiry the agent is denied with the reason and the delegator hears
/// the request expired.
#[test]
fn an_unanswered_prompt_is_denied_at_the_expiry() {
    let hub = hub("permission_timeout_secs = 1");
    let task = delegate(&hub, "hlask");
    let open = await_request(&hub, "alpha", &task);
    assert_eq!(open["state"], "open", "{open}");
    let done = outcome(&hub, "alpha", &task);
    assert_eq!(done["state"], "completed", "{done}");
    assert_eq!(
        done["text"], "asked: deny: denied: no answer within 1 s; not run",
        "{done}"
    );
    assert!(!work(&hub).join("proof.txt").exists());
    let audit = hub.audit();
    let expired: Vec<&Value> = audit
        .iter()
        .filter(|r| r["event"] == "request_expired" && r["task"] == task.as_str())
        .collect();
    assert_eq!(expired.len(), 1, "{audit:?}");
    assert_eq!(expired[0]["request"], open["request"]);
}

/// The delegator's cancel closes the open prompt (audited `cancelled`) and ends the task
/// `cancelled`; nothing runs.
#[test]
fn a_cancel_closes_the_open_prompt() {
    let hub = hub("");
    let task = delegate(&hub, "hlask");
    let open = await_request(&hub, "alpha", &task);
    let r = verb(&hub, "alpha", &json!({"cancel": {"task": task}}));
    assert_eq!(r["cancel"]["state"], "cancelling", "{r}");
    let done = outcome(&hub, "alpha", &task);
    assert_eq!(done["state"], "cancelled", "{done}");
    assert!(!work(&hub).join("proof.txt").exists());
    let audit = hub.wait_audit("the close", |audit| {
        audit
            .iter()
            .any(|r| r["event"] == "request_closed" && r["task"] == task.as_str())
    });
    let closed = audit
        .iter()
        .find(|r| r["event"] == "request_closed" && r["task"] == task.as_str())
        .unwrap();
    assert_eq!(closed["request"], open["request"]);
    assert_eq!(closed["why"], "cancelled", "{closed}");
}

/// Claude asks the tool about the hub's own tools too: `agent-hub mcp` allows those itself
/// (nobody is asked, nothing is held) and the task talks back to the hub as itself.
#[test]
fn the_hubs_own_tools_are_allowed_by_the_mcp_server_itself() {
    let hub = hub("");
    let task = delegate(&hub, "hlown");
    let done = outcome(&hub, "alpha", &task);
    assert_eq!(done["state"], "completed", "{done}");
    let text = done["text"].as_str().unwrap();
    assert!(text.starts_with("asked: allow; tool whoami: "), "{text}");
    assert!(text.contains(&task), "whoami answered as the task: {text}");
    assert!(
        hub.audit()
            .iter()
            .all(|r| !(r["event"] == "request_opened" && r["task"] == task.as_str())),
        "nothing was held"
    );
}

/// Hostile askers: a roster agent and an ACP task (which does not ask through the tool) are
/// refused; the headless task's own identity replaying the toolUseId of the open request is
/// refused; a second prompt past `max_open_requests_per_task` is denied at once (audited
/// `request_refused`). The held request is untouched by all of it and still answerable.
#[test]
fn hostile_askers_are_refused_and_a_flood_is_denied() {
    let hub = hub("max_open_requests_per_task = 1");
    let reply = ask_as(&hub, "alpha", token_of("alpha"), "toolu_x");
    assert_eq!(
        refusal(&reply),
        "invalid task_permission: only a delegated task's own agent may ask (as its task identity)"
    );
    // An ACP task, held on its own request, with its own token.
    let acp = delegate(&hub, "fakeask");
    let acp_open = await_request(&hub, "alpha", &acp);
    assert_eq!(acp_open["state"], "open");
    let reply = ask_as(&hub, &acp, &task_token(&hub, &acp), "toolu_x");
    assert_eq!(
        refusal(&reply),
        format!("invalid task_permission: {acp} does not ask through the permission tool (only a headless task whose manifest sets run.headless_mcp does)")
    );
    // The headless task, held on toolu_fake_1.
    let task = delegate(&hub, "hlask");
    let open = await_request(&hub, "alpha", &task);
    let token = task_token(&hub, &task);
    let reply = ask_as(&hub, &task, &token, "toolu_fake_1");
    assert_eq!(
        refusal(&reply),
        "invalid task_permission: toolUseId toolu_fake_1 was asked about already"
    );
    // A wrong token for the task's name never authenticates.
    let mut r = hub.raw();
    r.write(&hello_line(&task, "tok-forged-000000000000"));
    let line = r.line();
    assert!(line.contains("error"), "{line}");
    let reply = ask_as(&hub, &task, &token, "toolu_flood_1");
    assert_eq!(
        reply,
        json!({"task_permission": {"behavior": "deny",
            "message": "denied: this task holds 1 open requests already, the most it may (tasks.max_open_requests_per_task)"}})
    );
    assert!(hub
        .audit()
        .iter()
        .any(|r| r["event"] == "request_refused" && r["task"] == task.as_str()));
    let out = answer_cli(
        &hub,
        &[
            "--id",
            &task,
            "--request",
            open["request"].as_str().unwrap(),
            "--option",
            "allow",
        ],
    );
    out.assert_code(0);
    let done = outcome(&hub, "alpha", &task);
    assert_eq!(done["text"], "asked: allow; ran", "{done}");
    let r = verb(&hub, "alpha", &json!({"cancel": {"task": acp}}));
    assert_eq!(r["cancel"]["state"], "cancelling", "{r}");
}
