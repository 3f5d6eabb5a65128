//! Usage and cost, counted honestly (issue 38 part A; docs/delegation.md "Cost and usage"),
//! through the real binaries: the hub runs `fake-acp-agent usage MODE`
//! (crates/test-fakes/src/bin/fake-acp-agent/usage.rs), which reports its figures as a real
//! agent does, and the delegator finds them in `task_outcome`, `task_progress` and `task
//! status`, after a restart too; a budget passed cancels the task; a budget on an agent that
//! does not report its figure is refused unless `allowUnmetered`. Every wait is an await
//! with a deadline or a bounded poll, never a sleep.

use crate::delegate::{manifest, outcome, status, task_id, verb, wait_status};
use crate::harness::{hello_line, token_of, Hub, Setup, OK};
use serde_json::{json, Value};
use std::time::Duration;

/// The fake agent in `usage MODE`, its manifest saying it reports `reports`.
fn usage_manifest(name: &str, mode: &str, reports: &[&str]) -> String {
    let list: Vec<String> = reports.iter().map(|r| format!("{r:?}")).collect();
    manifest(name, &["usage", mode]).replace(
        "headless = []",
        &format!("reports = [{}]\nheadless = []", list.join(", ")),
    )
}

fn setup(sqlite: bool) -> Setup {
    let mut setup = Setup::new();
    if sqlite {
        setup = setup.with_sqlite_store(1 << 30);
    }
    std::fs::create_dir_all(setup.path("work")).unwrap();
    std::fs::create_dir_all(setup.path("manifests")).unwrap();
    for (name, mode, reports) in [
        // Claude's adapter: all three.
        (
            "claudeish",
            "cumulative",
            &["tokens", "cost", "context"][..],
        ),
        ("spender", "hold", &["tokens", "cost", "context"][..]),
        // Gemini 0.61: tokens from _meta.quota only.
        ("geminiish", "meta", &["tokens"][..]),
        // codex-acp / OpenCode as seen: nothing, and a manifest that says so.
        ("silent", "none", &[][..]),
    ] {
        std::fs::write(
            setup.path(&format!("manifests/{name}.toml")),
            usage_manifest(name, mode, reports),
        )
        .unwrap();
    }
    setup.config_text = Some(format!("{}{}", setup.generated_config(), tasks(&setup)));
    setup
}

fn tasks(setup: &Setup) -> String {
    let root = std::fs::canonicalize(setup.path("work")).unwrap();
    format!(
        "\n[tasks]\ncwd_roots = [{:?}]\nmanifests_dir = {:?}\ncredentials_dir = {:?}\nmin_progress_secs = 1\n",
        root.to_str().unwrap(),
        setup.path("manifests").to_str().unwrap(),
        setup.path("task-creds").to_str().unwrap(),
    )
}

fn delegate(hub: &Hub, agent: &str, extra: Value) -> Value {
    let cwd = std::fs::canonicalize(hub.setup.path("work")).unwrap();
    let mut req = json!({"agent": agent, "cwd": cwd, "prompt": "count it"});
    for (k, v) in extra.as_object().unwrap() {
        req[k] = v.clone();
    }
    verb(hub, "alpha", &json!({ "delegate": req }))
}

/// The first `task_progress` envelope for `task` whose body has `key`: each one is awaited
/// with a deadline and acked, so the hub sends the next (at most 20).
fn progress_with(hub: &Hub, task: &str, key: &str) -> Value {
    for _ in 0..20 {
        let mut r = hub.raw();
        r.stream()
            .set_read_timeout(Some(Duration::from_secs(60)))
            .unwrap();
        r.write(&format!(
            "{}{}\n",
            hello_line("alpha", token_of("alpha")),
            json!({"await": {"replyTo": task, "kind": "task_progress", "timeoutSecs": 60, "ack": true}})
        ));
        r.expect_line(OK);
        let body = r.json()["envelope"]["body"].clone();
        if body.get(key).is_some() {
            return body;
        }
    }
    panic!("no task_progress with {key}")
}

#[test]
fn usage_and_cost_reach_the_outcome_and_the_record_and_survive_a_restart() {
    let mut hub = setup(true).start();
    let task = task_id(&delegate(&hub, "claudeish", json!({})));
    let body = outcome(&hub, "alpha", &task);
    assert_eq!(body["state"], "completed", "{body}");
    // The prompt's usage, per turn, as the agent computed it; the run's last cost (0.3, the
    // third cumulative update, never 0.1 + 0.2 + 0.3); the context window.
    assert_eq!(
        body["usage"],
        json!({"inputTokens":100,"outputTokens":20,"totalTokens":120,"cachedReadTokens":50,"source":"acp"}),
        "{body}"
    );
    assert_eq!(
        body["cost"],
        json!({"amount":0.3,"currency":"USD","source":"acp"})
    );
    assert_eq!(body["context"], json!({"used":1200,"size":200000}));
    assert!(body.get("budget").is_none(), "no budget asked: {body}");
    let record = status(&hub, "alpha", &task);
    for k in ["usage", "cost", "context"] {
        assert_eq!(record[k], body[k], "{record}");
    }
    // The audit's task_ended carries the totals.
    let ended = hub
        .audit()
        .into_iter()
        .find(|r| r["event"] == "task_ended" && r["task"] == task.as_str())
        .unwrap();
    assert_eq!(
        (ended["tokens"].clone(), ended["cost_usd"].clone()),
        (json!(120), json!(0.3))
    );
    // Durable: after a restart on the same SQLite store the record still has them.
    hub.terminate();
    hub.setup.port = hub.port;
    hub.setup.config_text = Some(format!(
        "{}{}",
        hub.setup.generated_config(),
        tasks(&hub.setup)
    ));
    hub.restart();
    let after = status(&hub, "alpha", &task);
    assert_eq!(after["state"], "completed");
    for k in ["usage", "cost", "context"] {
        assert_eq!(after[k], body[k], "{after}");
    }
}

#[test]
fn a_running_tasks_progress_and_status_carry_its_cost_so_far() {
    let hub = setup(false).start();
    // A budget it will not pass (the agent stops at 1.0), so it waits for our cancel.
    let task = task_id(&delegate(
        &hub,
        "spender",
        json!({"progressSecs": 1, "maxCostUsd": 5}),
    ));
    // The session coalesces updates (one snapshot per progress interval): the cost shows in
    // the first snapshot after the agent sent it.
    let p = progress_with(&hub, &task, "cost");
    assert_eq!(p["state"], "running", "{p}");
    assert_eq!(p["cost"]["currency"], "USD", "{p}");
    assert_eq!(p["cost"]["source"], "acp");
    assert!(p["cost"]["amount"].as_f64().unwrap() > 0.0, "{p}");
    assert_eq!(p["context"]["size"], 200000, "{p}");
    assert!(
        p.get("usage").is_none(),
        "no turn has ended: no token counts yet: {p}"
    );
    let s = wait_status(&hub, "alpha", &task, |s| {
        s["cost"]["amount"].as_f64() == Some(1.0)
    });
    assert_eq!(s["state"], "running");
    assert_eq!(s["budget"], json!({"maxCostUsd": 5.0}));
    verb(&hub, "alpha", &json!({"cancel": {"task": task}}));
    let body = outcome(&hub, "alpha", &task);
    assert_eq!(body["state"], "cancelled", "{body}");
    assert_eq!(body["cost"]["amount"], 1.0, "{body}");
}

#[test]
fn a_task_whose_cost_passes_its_budget_is_cancelled_and_says_why() {
    let hub = setup(false).start();
    let task = task_id(&delegate(&hub, "spender", json!({"maxCostUsd": 0.25})));
    let body = outcome(&hub, "alpha", &task);
    assert_eq!(body["state"], "cancelled", "{body}");
    // The book checks each figure that reaches it; the session coalesces the agent's burst of
    // updates into snapshots, so the figure that passed is the first snapshot's over 0.25.
    let amount = body["cost"]["amount"].as_f64().unwrap();
    assert!(amount > 0.25, "{body}");
    assert_eq!(
        body["reason"],
        format!("over budget: cost {amount} USD passed maxCostUsd 0.25"),
        "{body}"
    );
    assert_eq!(body["budget"], json!({"maxCostUsd":0.25,"passed":"cost"}));
    let passed: Vec<Value> = hub
        .audit()
        .into_iter()
        .filter(|r| r["event"] == "task_budget_passed")
        .collect();
    assert_eq!(passed.len(), 1, "{passed:?}");
    assert_eq!(passed[0]["task"], task.as_str());
    assert_eq!(passed[0]["what"], "cost");
    assert_eq!(passed[0]["limit"].as_f64(), Some(0.25));
    assert_eq!(passed[0]["value"].as_f64(), Some(amount));
    assert_eq!(status(&hub, "alpha", &task)["budget"]["passed"], "cost");
}

#[test]
fn a_budget_on_a_figure_the_agent_does_not_report_is_refused_unless_allowed() {
    let hub = setup(false).start();
    // An agent that reports nothing: either limit is refused, and no task is made.
    let r = delegate(&hub, "silent", json!({"maxTokens": 1000}));
    assert_eq!(
        r["error"]["message"],
        "invalid delegate: agent silent does not report its tokens (run.reports: -), so maxTokens cannot be kept; set allowUnmetered to run it without that limit",
        "{r}"
    );
    // Gemini-like: tokens yes, cost no.
    let r = delegate(&hub, "geminiish", json!({"maxCostUsd": 1}));
    assert_eq!(
        r["error"]["message"],
        "invalid delegate: agent geminiish does not report its cost (run.reports: tokens), so maxCostUsd cannot be kept; set allowUnmetered to run it without that limit",
        "{r}"
    );
    // Out of bounds, whatever the agent.
    for (k, v) in [("maxCostUsd", json!(0)), ("maxTokens", json!(0))] {
        let r = delegate(&hub, "claudeish", json!({ k: v }));
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .starts_with("invalid delegate: max"),
            "{r}"
        );
    }
    let r = delegate(&hub, "claudeish", json!({"maxCostUsd": "1"}));
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("malformed line"),
        "{r}"
    );
    let listed = verb(&hub, "alpha", &json!({"tasks": {}}));
    assert_eq!(
        listed["tasks"]["tasks"],
        json!([]),
        "no task was made: {listed}"
    );
    // With allowUnmetered it runs; the outcome says the budget was not kept and shows no
    // figure (never a 0).
    let task = task_id(&delegate(
        &hub,
        "silent",
        json!({"maxTokens": 1000, "allowUnmetered": true}),
    ));
    let body = outcome(&hub, "alpha", &task);
    assert_eq!(body["state"], "completed", "{body}");
    assert_eq!(body["budget"], json!({"maxTokens":1000,"kept":false}));
    for k in ["usage", "cost", "context"] {
        assert!(body.get(k).is_none(), "{k}: {body}");
    }
}

#[test]
fn gemini_tokens_come_from_meta_quota_and_a_token_budget_is_kept_on_them() {
    let hub = setup(false).start();
    let task = task_id(&delegate(&hub, "geminiish", json!({"maxTokens": 500})));
    let body = outcome(&hub, "alpha", &task);
    // The turn ended before its tokens were known: it keeps its state, and the budget says
    // which limit its figures passed (940 > 500).
    assert_eq!(body["state"], "completed", "{body}");
    assert_eq!(
        body["usage"],
        json!({"inputTokens":900,"outputTokens":40,"source":"acp-meta"})
    );
    assert!(body.get("cost").is_none(), "{body}");
    assert_eq!(body["budget"], json!({"maxTokens":500,"passed":"tokens"}));
    assert!(hub
        .audit()
        .iter()
        .any(|r| r["event"] == "task_budget_passed" && r["value"] == 940));
}

#[test]
fn the_cli_delegates_with_a_budget_and_agents_shows_what_each_reports() {
    let hub = setup(false).start();
    let cwd = std::fs::canonicalize(hub.setup.path("work")).unwrap();
    let cwd = cwd.to_str().unwrap();
    let out = hub.cli(
        "delegate",
        "alpha",
        &[
            "--agent",
            "silent",
            "--cwd",
            cwd,
            "--prompt",
            "p",
            "--max-cost",
            "2",
        ],
    );
    out.assert_code(1);
    assert!(
        out.stderr.contains("does not report its cost"),
        "{}",
        out.stderr
    );
    let out = hub.cli(
        "delegate",
        "alpha",
        &[
            "--agent",
            "claudeish",
            "--cwd",
            cwd,
            "--prompt",
            "p",
            "--max-cost",
            "2",
            "--max-tokens",
            "100000",
            "--wait",
        ],
    );
    out.assert_code(0);
    assert!(
        out.stdout.contains("\"cost\":{\"amount\":0.3"),
        "{}",
        out.stdout
    );
    let task = out.stdout.lines().next().unwrap().to_owned();
    // `agents` says what each reports (the REPORTS column).
    let agents = crate::harness::run(
        {
            let mut c = std::process::Command::new(crate::harness::CLIENT);
            c.args(["agents", "--config"]).arg(hub.setup.config_path());
            c
        },
        None,
    );
    let row = |name: &str| {
        agents
            .stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name}: {}", agents.stdout))
            .to_owned()
    };
    assert!(
        row("claudeish").contains(" tokens,cost,context "),
        "{}",
        agents.stdout
    );
    assert!(row("geminiish").contains(" tokens "), "{}", agents.stdout);
    assert!(
        row("silent").contains("  -  ") || row("silent").contains(" - "),
        "{}",
        agents.stdout
    );
    let mut cmd = std::process::Command::new(crate::harness::CLIENT);
    cmd.args(["task", "status", "--as", "alpha", "--token-file"])
        .arg(hub.token_file("alpha"))
        .args(["--port", &hub.port.to_string(), "--id", &task])
        .current_dir(hub.setup.path("cwd"));
    let st = crate::harness::run(cmd, None);
    st.assert_code(0);
    assert!(st.stdout.contains("\"totalTokens\":120"), "{}", st.stdout);
    assert!(
        st.stderr
            .contains("usage: 120 tokens (input 100, output 20), cost 0.3 USD"),
        "{}",
        st.stderr
    );
}
