//! The delegation phase's throwaway setup (phase 7, docs/performance.md "Delegation"): the
//! fake ACP agent's binary, two manifests naming it (`benchdone`: ends its turn at once;
//! `benchhang`: works until cancelled), the task working folder, and one hub config per store
//! with a `[tasks]` table (docs/delegation.md, docs/operations.md "Delegated tasks").
//!
//! Owns: those files, and reading the fake agent's `--stamps` file back
//! (crates/test-fakes/src/bin/fake-acp-agent.rs). Refuses: anything about running or timing tasks
//! (`phase_delegate`).

use crate::base::Res;
use crate::fixtures::{bench_config, write_private};
use crate::options::{Opts, StoreKind};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The manifest whose agent ends its turn at once (one chunk, one tool call, `end_turn`).
pub(crate) const DONE_AGENT: &str = "benchdone";
/// The manifest whose agent sends one chunk and then waits for `session/cancel`.
pub(crate) const HANG_AGENT: &str = "benchhang";
/// The manifest whose agent asks permission over and over, each time as soon as it has the
/// answer (`fake-acp-agent ask_loop N`; `phase_approvals`).
pub(crate) const ASK_AGENT: &str = "benchask";

/// `--fake-agent`, else `fake-acp-agent` next to this executable (built by
/// `cargo build --release` with the other binaries).
pub(crate) fn find_fake_agent(explicit: Option<&Path>) -> Res<PathBuf> {
    if let Some(p) = explicit {
        return if p.is_file() {
            Ok(p.to_owned())
        } else {
            Err(format!("--fake-agent {}: no such file", p.display()))
        };
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this executable: {e}"))?;
    let sibling = exe.with_file_name("fake-acp-agent");
    if sibling.is_file() {
        Ok(sibling)
    } else {
        Err(format!(
            "no fake-acp-agent next to {}; run `cargo build --release` first, pass --fake-agent PATH, or skip the delegation phase with --delegate-tasks 0",
            exe.display()
        ))
    }
}

/// The hub refuses every task when the `agent-hub` client (the task's MCP server) is not
/// beside `agent-hub-server` (docs/delegation.md "How a task runs"): say so before the run.
pub(crate) fn check_task_client(server: &Path) -> Res<()> {
    let client = server.with_file_name("agent-hub");
    if client.is_file() {
        Ok(())
    } else {
        Err(format!(
            "no agent-hub client at {} (the hub runs it as each task's MCP server); run `cargo build --release` first, or skip the delegation phase with --delegate-tasks 0",
            client.display()
        ))
    }
}

/// The files of the delegation phase, in the bench's temp dir.
pub(crate) struct DelegateFixture {
    /// The fake agent, canonical (also run directly for the floor, `delegate_direct`).
    pub(crate) fake: PathBuf,
    pub(crate) config_memory: PathBuf,
    pub(crate) config_sqlite: PathBuf,
    /// The tasks' cwd (canonical: the hub checks it against `tasks.cwd_roots` with every
    /// symlink resolved, and the system temp dir may be behind one).
    pub(crate) cwd: PathBuf,
    /// Where `benchdone` appends its stamps, and `benchhang` its own.
    pub(crate) done_stamps: PathBuf,
    pub(crate) hang_stamps: PathBuf,
}

impl DelegateFixture {
    pub(crate) fn write(dir: &Path, opts: &Opts, fake: &Path) -> Res<DelegateFixture> {
        let fake = std::fs::canonicalize(fake)
            .map_err(|e| format!("fake agent {}: {e}", fake.display()))?;
        let mk = |name: &str| -> Res<PathBuf> {
            let p = dir.join(name);
            std::fs::create_dir(&p).map_err(|e| format!("cannot create {}: {e}", p.display()))?;
            std::fs::canonicalize(&p).map_err(|e| format!("{}: {e}", p.display()))
        };
        let cwd = mk("task-cwd")?;
        let manifests = mk("manifests")?;
        let dir = std::fs::canonicalize(dir).map_err(|e| e.to_string())?;
        // In the task root: the agents run in the hub's default sandbox, which hides the
        // hub's folder (this one, which holds its config) but for the task roots
        // (docs/delegation.md "Task identity").
        let done_stamps = cwd.join("stamps-done.jsonl");
        let hang_stamps = cwd.join("stamps-hang.jsonl");
        let ask_stamps = cwd.join("stamps-ask.jsonl");
        let asks = crate::phase_approvals::asks_of(opts.approval_requests).to_string();
        for (name, stamps, scenario) in [
            (DONE_AGENT, &done_stamps, &["end_turn", "1"][..]),
            (HANG_AGENT, &hang_stamps, &["hang"][..]),
            (ASK_AGENT, &ask_stamps, &["ask_loop", asks.as_str()][..]),
        ] {
            write_private(
                &manifests.join(format!("{name}.toml")),
                &manifest(name, &fake, stamps, scenario)?,
            )?;
        }
        let mut out = Vec::new();
        for kind in [StoreKind::Memory, StoreKind::Sqlite] {
            let path = dir.join(format!("config-delegate-{}.toml", kind.name()));
            let text = format!(
                "{}{}",
                bench_config(opts, kind)?,
                tasks_table(opts, &cwd, &manifests, &dir.join("task-creds"))?
            );
            write_private(&path, &text)?;
            out.push(path);
        }
        let config_sqlite = out.pop().ok_or("no sqlite config")?;
        let config_memory = out.pop().ok_or("no memory config")?;
        Ok(DelegateFixture {
            fake,
            config_memory,
            config_sqlite,
            cwd,
            done_stamps,
            hang_stamps,
        })
    }

    pub(crate) fn config(&self, kind: StoreKind) -> &Path {
        match kind {
            StoreKind::Memory => &self.config_memory,
            StoreKind::Sqlite => &self.config_sqlite,
        }
    }
}

fn toml_str(s: &str) -> String {
    toml::Value::String(s.to_owned()).to_string()
}

fn path_str(p: &Path) -> Res<&str> {
    p.to_str()
        .ok_or_else(|| format!("{} is not UTF-8; use --work-dir", p.display()))
}

/// An agent manifest (docs/agents.md) whose `run.acp` is the fake agent with `--stamps`.
fn manifest(name: &str, fake: &Path, stamps: &Path, scenario: &[&str]) -> Res<String> {
    let mut acp = vec![
        toml_str(path_str(fake)?),
        toml_str("--stamps"),
        toml_str(path_str(stamps)?),
    ];
    acp.extend(scenario.iter().map(|s| toml_str(s)));
    Ok(format!(
        "name = \"{name}\"\ndisplay = \"agent-hub-bench fake ACP agent ({name})\"\nbinaries = [\"fake-acp-agent\"]\n\n[observe]\nsessions = \"none\"\ntranscript = \"none\"\n\n[run]\nacp = [{}]\nheadless = []\noutcome = \"exit-code\"\n\n[deliver]\nmode = \"pull\"\n\n[install]\nmcp_config = \"\"\nhook = \"none\"\nskills_dir = \"\"\n",
        acp.join(", ")
    ))
}

/// `[tasks]`, appended to the bench config (which has none: the example's is commented out).
/// Room for the parked tasks plus one, so a timed task never waits in the queue.
fn tasks_table(opts: &Opts, cwd: &Path, manifests: &Path, creds: &Path) -> Res<String> {
    Ok(format!(
        "\n[tasks]\nmax_concurrent = {}\ncwd_roots = [{}]\nmanifests_dir = {}\ncredentials_dir = {}\n",
        opts.delegate_running + 1,
        toml_str(path_str(cwd)?),
        toml_str(path_str(manifests)?),
        toml_str(path_str(creds)?),
    ))
}

/// One line of the fake agent's `--stamps` file: wall-clock ns since the Unix epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Stamp {
    /// The agent process's `main` began.
    pub(crate) start_ns: u64,
    /// `session/prompt` arrived (after `initialize` and `session/new`).
    pub(crate) prompt_ns: u64,
    /// The first `session/update` was written and flushed to the hub.
    pub(crate) update_ns: u64,
}

/// Parses a stamps file into prompt text → stamp. A line that is not a complete stamp, or a
/// prompt seen twice, is an error: the bench's prompts are unique, so either means the file
/// is not what this run wrote.
pub(crate) fn parse_stamps(text: &str) -> Res<HashMap<String, Stamp>> {
    let mut out = HashMap::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: serde_json::Value =
            serde_json::from_str(line).map_err(|e| format!("stamps line {}: {e}", n + 1))?;
        let ns = |k: &str| {
            v.get(k)
                .and_then(serde_json::Value::as_u64)
                .filter(|&x| x > 0)
                .ok_or_else(|| format!("stamps line {}: no {k}", n + 1))
        };
        let stamp = Stamp {
            start_ns: ns("start_ns")?,
            prompt_ns: ns("prompt_ns")?,
            update_ns: ns("update_ns")?,
        };
        let prompt = v
            .get("prompt")
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| format!("stamps line {}: no prompt", n + 1))?;
        if out.insert(prompt.to_owned(), stamp).is_some() {
            return Err(format!(
                "stamps line {}: prompt {prompt:?} seen twice",
                n + 1
            ));
        }
    }
    Ok(out)
}

/// `later - earlier` of two wall-clock readings in ns, or an error when the clock ran
/// backwards between them (a wall-clock step during the run: the sample would be a lie).
pub(crate) fn wall_gap(earlier_ns: u64, later_ns: u64) -> Res<Duration> {
    later_ns
        .checked_sub(earlier_ns)
        .map(Duration::from_nanos)
        .ok_or_else(|| {
            format!("the wall clock ran backwards ({earlier_ns} ns then {later_ns} ns); run again")
        })
}

/// The wall clock now, ns since the Unix epoch (the fake agent's clock).
pub(crate) fn wall_now_ns() -> Res<u64> {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .map_err(|e| format!("wall clock before 1970: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_parse_by_prompt_and_refuse_incomplete_or_repeated_lines() {
        let text = "{\"start_ns\":10,\"prompt_ns\":20,\"update_ns\":30,\"prompt\":\"bench task 0\"}\n\n{\"start_ns\":11,\"prompt_ns\":21,\"update_ns\":31,\"prompt\":\"bench task 1\"}\n";
        let m = parse_stamps(text).unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(
            m["bench task 1"],
            Stamp {
                start_ns: 11,
                prompt_ns: 21,
                update_ns: 31
            }
        );
        // A zero is what the fake agent writes when it never saw the prompt.
        let e = parse_stamps("{\"start_ns\":1,\"prompt_ns\":0,\"update_ns\":3,\"prompt\":\"p\"}")
            .unwrap_err();
        assert!(e.contains("no prompt_ns"), "{e}");
        let e = parse_stamps("{\"start_ns\":1,\"update_ns\":3,\"prompt\":\"p\"}").unwrap_err();
        assert!(e.contains("no prompt_ns"), "{e}");
        let e = parse_stamps("{\"start_ns\":1,\"prompt_ns\":2,\"update_ns\":3}").unwrap_err();
        assert!(e.contains("no prompt"), "{e}");
        let twice = "{\"start_ns\":1,\"prompt_ns\":2,\"update_ns\":3,\"prompt\":\"p\"}\n";
        let e = parse_stamps(&format!("{twice}{twice}")).unwrap_err();
        assert!(e.contains("line 2") && e.contains("twice"), "{e}");
        let e = parse_stamps("{\"start_ns\":1,\"prompt_n").unwrap_err();
        assert!(e.contains("line 1"), "{e}");
    }

    #[test]
    fn wall_gaps_refuse_a_clock_that_ran_backwards() {
        assert_eq!(wall_gap(1_000, 3_500).unwrap(), Duration::from_nanos(2_500));
        assert_eq!(wall_gap(7, 7).unwrap(), Duration::ZERO);
        assert!(wall_gap(3_500, 1_000).unwrap_err().contains("backwards"));
    }

    #[test]
    fn the_manifest_quotes_paths_as_toml_strings() {
        let m = manifest(
            "benchdone",
            Path::new("/opt/we\"ird/fake-acp-agent"),
            Path::new("/tmp/s.jsonl"),
            &["end_turn", "1"],
        )
        .unwrap();
        let doc: toml::Table = toml::from_str(&m).unwrap();
        let acp: Vec<&str> = doc["run"]["acp"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        assert_eq!(
            acp,
            [
                "/opt/we\"ird/fake-acp-agent",
                "--stamps",
                "/tmp/s.jsonl",
                "end_turn",
                "1"
            ]
        );
        assert_eq!(doc["name"].as_str(), Some("benchdone"));
    }
}
