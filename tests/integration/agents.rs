//! Agents joining the hub (issue 5, docs/agents.md): manifests against the fixtures in
//! `protocol/manifests/`, and the real `agent-hub` binary's `install` / `uninstall` into a
//! temporary HOME for every built-in agent, byte for byte against `protocol/install/<agent>/`
//! (`before/` → `after-install/` → `after-uninstall/`), plus idempotency, dry runs, `--all`,
//! `agents` and `agents ps`.
//!
//! `AGENTS_BLESS=1 cargo test --release --test integration agents::` rewrites the `.expected` files of the
//! invalid manifests and the `after-*` trees from what the code does now; review the diff.
//! Expected files spell the temporary HOME as `{HOME}`.

use agent_hub_host::agents::diff;
use agent_hub_host::agents::install;
use agent_hub_host::agents::manifest::{DeliverMode, HookKind, Manifest, McpFormat};
use agent_hub_host::agents::registry::{Origin, Registry};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

const BIN: &str = env!("CARGO_BIN_EXE_agent-hub");
const AGENTS: [&str; 5] = ["claude", "codex", "gemini", "opencode", "droid"];
/// What the installed entries run; fixed so the expected files do not depend on the build dir.
const HUB_COMMAND: &str = "/usr/local/bin/agent-hub";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn bless() -> bool {
    std::env::var_os("AGENTS_BLESS").is_some_and(|v| v == "1")
}

// ----- a temporary directory -----

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        // Manifests written here get an operator's modes whatever the runner's umask: a
        // group-writable one is refused (docs/agents.md "Manifests").
        // SAFETY: umask(2) only sets this process's file-creation mask.
        unsafe {
            libc::umask(0o022);
        }
        let p = std::env::temp_dir().join(format!(
            "agent-hub-agents-{}-{}-{tag}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ----- file trees -----

/// Every file under `dir` (relative path → text), skipping `.agent-hub/` (the token lives
/// there) and the empty directories an install leaves.
fn read_tree(dir: &Path) -> BTreeMap<String, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let rel = p.strip_prefix(base).unwrap().to_string_lossy().into_owned();
            if rel == ".agent-hub" || rel == "bin" {
                continue;
            }
            if p.is_dir() {
                walk(base, &p, out);
            } else {
                out.insert(rel, std::fs::read_to_string(&p).unwrap());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn write_tree(dir: &Path, files: &BTreeMap<String, String>) {
    for (rel, text) in files {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

/// A skill file's stamp covers the real HOME path, so it differs in every run: a stamp that
/// matches its file is spelled `sha256 {SHA256}` in expected files; one that does not match
/// keeps its digits and so differs from them.
fn normalise_stamp(text: String) -> String {
    const PREFIX: &str = "<!-- agent-hub install: sha256 ";
    if !install::skill_is_pristine(&text) {
        return text;
    }
    let at = text.rfind(PREFIX).unwrap() + PREFIX.len();
    format!("{}{{SHA256}}{}", &text[..at], &text[at + 64..])
}

/// Compares a HOME tree with an expected tree (`{HOME}` and `{SHA256}` substituted), with a
/// diff per file.
fn assert_tree(home: &Path, expected_dir: &Path, what: &str) {
    let home_s = home.to_str().unwrap();
    let got: BTreeMap<String, String> = read_tree(home)
        .into_iter()
        .map(|(k, v)| (k, normalise_stamp(v).replace(home_s, "{HOME}")))
        .collect();
    if bless() {
        let _ = std::fs::remove_dir_all(expected_dir);
        std::fs::create_dir_all(expected_dir).unwrap();
        write_tree(expected_dir, &got);
        return;
    }
    let want = read_tree(expected_dir);
    let mut problems = String::new();
    for k in want
        .keys()
        .chain(got.keys())
        .collect::<std::collections::BTreeSet<_>>()
    {
        let d = diff::unified(
            k,
            want.get(k).map(String::as_str),
            got.get(k).map(String::as_str),
        );
        problems.push_str(&d);
    }
    assert!(
        problems.is_empty(),
        "{what}: HOME differs from {} (- expected, + got):\n{problems}",
        expected_dir.display()
    );
}

// ----- running the binary -----

fn run(home: &Path, path_var: &str, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env("HOME", home)
        .env("PATH", path_var)
        .env_remove("XDG_CONFIG_HOME")
        .output()
        .unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn token(home: &Path) -> String {
    use std::os::unix::fs::PermissionsExt;
    let t = home.join(".agent-hub/worker.token");
    std::fs::create_dir_all(t.parent().unwrap()).unwrap();
    std::fs::write(&t, "secret-token-never-printed\n").unwrap();
    std::fs::set_permissions(&t, std::fs::Permissions::from_mode(0o600)).unwrap();
    t.to_str().unwrap().to_owned()
}

fn install_args<'a>(agent_args: &[&'a str], token: &'a str, integrations: &'a str) -> Vec<&'a str> {
    let mut a = vec!["install"];
    a.extend_from_slice(agent_args);
    a.extend([
        "--as",
        "worker",
        "--token-file",
        token,
        "--port",
        "46110",
        "--command",
        HUB_COMMAND,
        "--integrations-dir",
        integrations,
    ]);
    a
}

// ----- manifests -----

#[test]
fn valid_manifest_fixtures_parse_and_are_named_after_their_files() {
    let dir = root().join("protocol/manifests/valid");
    let mut n = 0;
    let mut seed = None;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let m = Manifest::parse(&p.display().to_string(), &text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            format!("{}.toml", m.name),
            p.file_name().unwrap().to_string_lossy()
        );
        if m.name == "opencode" {
            // The seed's §3 example as written: none of our `[install]` additions, so it
            // loads with their defaults (docs/agents.md "Defaults").
            seed = Some(m);
        }
        n += 1;
    }
    assert!(n >= 5);
    let seed = seed.expect("valid/opencode.toml, the seed's example, is a fixture");
    assert_eq!(seed.deliver, DeliverMode::Pull);
    assert_eq!(seed.install.hook, HookKind::None);
    assert_eq!(
        seed.install.mcp.map(|c| c.format),
        Some(Some(McpFormat::OpencodeJson)),
        "told by the file name opencode.json"
    );
}

#[test]
fn invalid_manifest_fixtures_fail_with_their_expected_error() {
    let dir = root().join("protocol/manifests/invalid");
    let mut n = 0;
    let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    for p in &names {
        match p.extension().and_then(|x| x.to_str()) {
            Some("toml") => {}
            Some("expected") => {
                assert!(
                    p.with_extension("toml").exists(),
                    "{} has no manifest",
                    p.display()
                );
                continue;
            }
            _ => continue,
        }
        let text = std::fs::read_to_string(p).unwrap();
        let err = Manifest::parse(&p.display().to_string(), &text)
            .err()
            .unwrap_or_else(|| panic!("{} parsed but must not", p.display()));
        assert_eq!(err.source, p.display().to_string());
        let expected_path = p.with_extension("expected");
        if bless() {
            std::fs::write(&expected_path, format!("{}\n", err.detail())).unwrap();
        }
        let expected = std::fs::read_to_string(&expected_path)
            .unwrap_or_else(|_| panic!("{} has no .expected file", p.display()));
        assert_eq!(err.detail(), expected.trim_end(), "{}", p.display());
        n += 1;
    }
    assert!(n >= 30, "only {n} invalid fixtures");
}

#[test]
fn the_manifests_folder_overrides_adds_and_skips_bad_files() {
    let t = TempDir::new("registry");
    let valid = root().join("protocol/manifests/valid");
    let invalid = root().join("protocol/manifests/invalid");
    std::fs::copy(valid.join("claude.toml"), t.0.join("claude.toml")).unwrap();
    std::fs::copy(valid.join("goose.toml"), t.0.join("goose.toml")).unwrap();
    // An invalid override of codex: reported, and the built-in codex stays.
    let bad = std::fs::read_to_string(invalid.join("acp-shell-string.toml"))
        .unwrap()
        .replace("name     = \"x\"", "name     = \"codex\"");
    std::fs::write(t.0.join("codex.toml"), bad).unwrap();
    // A valid manifest in a file named after another agent.
    std::fs::copy(valid.join("minimal.toml"), t.0.join("gemini.toml")).unwrap();
    std::fs::write(t.0.join("notes.txt"), "not a manifest").unwrap();

    let reg = Registry::load(&t.0, true);
    let names: Vec<&str> = reg.manifests().map(|m| m.name.as_str()).collect();
    assert_eq!(
        names,
        ["claude", "codex", "gemini", "opencode", "droid", "goose"]
    );
    assert_eq!(
        reg.get("claude").unwrap().display,
        "Claude Code (work profile)"
    );
    assert!(matches!(reg.agents[0].1, Origin::Override(_)));
    assert_eq!(
        reg.get("codex").unwrap().display,
        "Codex CLI",
        "the built-in stays"
    );
    assert_eq!(reg.get("gemini").unwrap().display, "Gemini CLI");
    let problems: Vec<String> = reg.problems.iter().map(|p| p.to_string()).collect();
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems[0].ends_with("codex.toml: run.acp[2]: holds ' ', outside the allowed characters [A-Z a-z 0-9 . _ / : = @ + , -]"), "{problems:?}");
    assert!(problems[1].ends_with("gemini.toml: name: \"minimal\" does not match the file name; name the file minimal.toml"), "{problems:?}");

    let missing = Registry::load(&t.0.join("nope"), true);
    assert_eq!(missing.problems.len(), 1);
    assert_eq!(Registry::load(&t.0.join("nope"), false).problems.len(), 0);
}

#[test]
fn agents_lists_every_agent_and_reports_bad_manifests_without_failing() {
    let t = TempDir::new("list");
    let bin = t.0.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    fake_binary(&bin, "codex", "echo 'codex-cli 0.171.0'");
    fake_binary(&bin, "gemini", "echo 0.61.0");
    fake_binary(&bin, "opencode", "sleep 30"); // outlives the version timeout? no: killed at 5 s
    let agents_dir = t.0.join(".agent-hub/agents");
    std::fs::create_dir_all(&agents_dir).unwrap();
    std::fs::copy(
        root().join("protocol/manifests/invalid/binary-shell-metachar.toml"),
        agents_dir.join("x.toml"),
    )
    .unwrap();
    let path_var = format!("{}:/usr/bin:/bin", bin.display());
    let started = std::time::Instant::now();
    let out = run(&t.0, &path_var, &["agents", "--json"]);
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("x.toml: binaries[0]: holds ';'"),
        "{stderr}"
    );
    assert!(stderr.contains("manifest skipped"), "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 5);
    let row = |n: &str| rows.iter().find(|r| r["name"] == n).unwrap().clone();
    assert_eq!(row("codex")["installed"], true);
    assert_eq!(row("codex")["version"], "codex-cli 0.171.0");
    assert_eq!(row("codex")["headless_available"], true);
    assert_eq!(
        row("codex")["acp_available"],
        false,
        "codex-acp is a separate program"
    );
    assert_eq!(row("gemini")["acp_available"], true);
    // Delegated work: ACP where its program is there, else the headless fallback, else no.
    assert_eq!(row("gemini")["delegate"], "acp");
    assert_eq!(row("codex")["delegate"], "headless", "codex-acp is missing");
    assert_eq!(row("claude")["delegate"], "no");
    assert_eq!(row("opencode")["installed"], true);
    assert_eq!(
        row("opencode")["version"],
        serde_json::Value::Null,
        "timed out"
    );
    assert_eq!(row("claude")["installed"], false);
    assert_eq!(row("claude")["binary"], serde_json::Value::Null);

    let out = run(&t.0, &path_var, &["agents", "--no-version"]);
    let (stdout, _) = text(&out);
    assert!(stdout.starts_with("AGENT"), "{stdout}");
    let header: Vec<&str> = stdout.lines().next().unwrap().split_whitespace().collect();
    let at = |c: &str| header.iter().position(|h| *h == c);
    assert_eq!(at("DELEGATE"), at("HEADLESS").map(|i| i + 1), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("codex") && l.contains(&bin.join("codex").display().to_string())), "{stdout}");
}

/// The seed's §3 example manifest, verbatim (`protocol/manifests/valid/opencode.toml`).
fn seed_manifest() -> String {
    std::fs::read_to_string(root().join("protocol/manifests/valid/opencode.toml")).unwrap()
}

#[test]
fn agents_lists_the_seeds_example_manifest_as_written() {
    let t = TempDir::new("seed-list");
    // The user's manifests folder, found the way `agents` finds it: under HOME.
    let agents_dir = t.0.join(".agent-hub/agents");
    std::fs::create_dir_all(&agents_dir).unwrap();
    let file = agents_dir.join("opencode.toml");
    std::fs::write(&file, seed_manifest()).unwrap();

    let out = run(&t.0, "/nonexistent", &["agents", "--json", "--no-version"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stderr, "", "nothing skipped, nothing to warn about");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let rows = v.as_array().unwrap();
    assert_eq!(rows.len(), 5);
    let row = rows.iter().find(|r| r["name"] == "opencode").unwrap();
    // The built-in says plugin-event and has a headless template: these are the seed's.
    assert_eq!(row["deliver"], "pull", "{row}");
    assert_eq!(row["headless"], serde_json::Value::Null, "{row}");
    assert_eq!(row["acp"], serde_json::json!(["opencode", "acp"]));
    assert_eq!(
        row["manifest"],
        format!("{} (overrides the builtin)", file.display())
    );

    let out = run(&t.0, "/nonexistent", &["agents", "--no-version"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains(&format!(
            "opencode: manifest {} (overrides the builtin)",
            file.display()
        )),
        "{stdout}"
    );
    assert!(!stderr.contains("skipped"), "{stderr}");
}

#[test]
fn install_takes_the_seeds_manifest_as_written_and_asks_only_for_a_format_it_cannot_tell() {
    let t = TempDir::new("seed-install");
    let home = &t.0;
    let token = token(home);
    let agents_dir = home.join(".agent-hub/agents");
    std::fs::create_dir_all(&agents_dir).unwrap();
    std::fs::write(agents_dir.join("opencode.toml"), seed_manifest()).unwrap();
    // The seed's layout again, for a config file whose name says nothing of its format.
    let unknown = seed_manifest()
        .replace("name        = \"opencode\"", "name        = \"x\"")
        .replace("~/.config/opencode/opencode.json", "~/.x/config.json");
    assert_ne!(unknown, seed_manifest());
    std::fs::write(agents_dir.join("x.toml"), unknown).unwrap();
    let integrations = root().join("integrations");
    let integrations = integrations.to_str().unwrap();

    // The seed's opencode: the MCP server in opencode-json's shape, no plugin (no hook).
    let out = run(
        home,
        "/nonexistent",
        &install_args(&["--agent", "opencode"], &token, integrations),
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    let config = home.join(".config/opencode/opencode.json");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&config).unwrap()).unwrap();
    assert_eq!(v["mcp"]["agent-hub"]["type"], "local", "{v}");
    assert!(
        !home.join(".config/opencode/plugins").exists(),
        "deliver.mode = \"pull\" and no hook: no plugin"
    );

    // x: listed like any agent, and install asks for the key, naming the manifest's file.
    let out = run(home, "/nonexistent", &["agents", "--no-version"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success() && stderr.is_empty(), "{stderr}");
    assert!(stdout.lines().any(|l| l.starts_with("x ")), "{stdout}");
    let out = run(
        home,
        "/nonexistent",
        &install_args(&["--agent", "x"], &token, integrations),
    );
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let want = format!(
        "agent-hub: x: {}: install.mcp_format: is needed to edit ~/.x/config.json: its format cannot be told from the file name; add mcp_format = one of claude-json, codex-toml, gemini-json, opencode-json, droid-json (docs/agents.md \"Defaults\"); nothing was changed for it",
        agents_dir.join("x.toml").display()
    );
    assert!(stderr.contains(&want), "{stderr}");
    assert!(!home.join(".x").exists());

    // Uninstall everywhere: x's file is not there, so its format is not needed.
    let out = run(home, "/nonexistent", &["uninstall", "--all"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("~/.x/config.json: MCP server \"agent-hub\" not present"),
        "{stdout}"
    );
    assert!(!config.exists(), "the file install created is gone again");
}

fn fake_binary(dir: &Path, name: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
}

#[cfg(target_os = "linux")]
#[test]
fn agents_ps_finds_a_running_agent_with_its_cwd() {
    let t = TempDir::new("ps");
    let bin = t.0.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    // A manifest agent with a unique binary name, so other tests' processes never match.
    let name = format!("psagent{}", std::process::id());
    let agents_dir = t.0.join("agents");
    std::fs::create_dir_all(&agents_dir).unwrap();
    let manifest = std::fs::read_to_string(root().join("protocol/manifests/valid/minimal.toml"))
        .unwrap()
        .replace("name     = \"minimal\"", &format!("name     = \"{name}\""))
        .replace(
            "binaries = [\"minimal-agent\"]",
            &format!("binaries = [\"{name}\"]"),
        );
    std::fs::write(agents_dir.join(format!("{name}.toml")), manifest).unwrap();
    let work = t.0.join("work dir");
    std::fs::create_dir_all(&work).unwrap();
    // `exec sleep` would rename the process; a plain script keeps its name as comm.
    fake_binary(&bin, &name, "sleep 30; true");
    let mut child = Command::new(bin.join(&name))
        .current_dir(&work)
        .spawn()
        .unwrap();
    let mut found = None;
    for _ in 0..50 {
        let out = run(
            &t.0,
            "/usr/bin:/bin",
            &[
                "agents",
                "ps",
                "--json",
                "--agents-dir",
                agents_dir.to_str().unwrap(),
            ],
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        found = v
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["agent"] == name.as_str())
            .cloned();
        if found.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    let p = found.expect("the running agent is listed");
    assert_eq!(p["pid"], child.id());
    assert_eq!(p["cwd"], work.to_str().unwrap());
    assert_eq!(p["status"], "unknown");
}

/// Issue 29: `agents ps` printed another process's working directory raw, and a folder name
/// may hold terminal escapes (clipboard OSC 52, title, clear, a bidi override): the table and
/// the JSON print none of their control bytes, and the JSON still says the same path.
#[cfg(target_os = "linux")]
#[test]
fn agents_ps_prints_no_control_bytes_from_a_hostile_cwd() {
    let t = TempDir::new("ps-hostile");
    let bin = t.0.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let name = format!("psevil{}", std::process::id());
    let agents_dir = t.0.join("agents");
    std::fs::create_dir_all(&agents_dir).unwrap();
    let manifest = std::fs::read_to_string(root().join("protocol/manifests/valid/minimal.toml"))
        .unwrap()
        .replace("name     = \"minimal\"", &format!("name     = \"{name}\""))
        .replace(
            "binaries = [\"minimal-agent\"]",
            &format!("binaries = [\"{name}\"]"),
        );
    std::fs::write(agents_dir.join(format!("{name}.toml")), manifest).unwrap();
    let hostile = "w\u{1b}]52;c;ZXZpbA==\u{7}\u{1b}]0;pwned\u{7}\u{1b}c\u{9b}2J\u{202e}gpj";
    let work = t.0.join(hostile);
    std::fs::create_dir_all(&work).unwrap();
    fake_binary(&bin, &name, "sleep 30; true");
    let mut child = Command::new(bin.join(&name))
        .current_dir(&work)
        .spawn()
        .unwrap();
    let ps = |json: bool| {
        let mut args = vec!["agents", "ps", "--agents-dir", agents_dir.to_str().unwrap()];
        if json {
            args.push("--json");
        }
        String::from_utf8(run(&t.0, "/usr/bin:/bin", &args).stdout).unwrap()
    };
    let mut found = None;
    for _ in 0..50 {
        let out = ps(true);
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        if let Some(p) = v
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["agent"] == name.as_str())
        {
            found = Some((out.clone(), p.clone()));
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let table = ps(false);
    let _ = child.kill();
    let _ = child.wait();
    let (json_out, p) = found.expect("the running agent is listed");
    assert_eq!(
        p["cwd"],
        work.to_str().unwrap(),
        "the JSON value is the path itself"
    );
    for (what, out) in [("json", json_out.as_str()), ("table", table.as_str())] {
        let bad: Vec<char> = out
            .chars()
            .filter(|&c| c != '\n' && agent_hub_proto::kernel::text::is_unsafe(c))
            .collect();
        assert!(bad.is_empty(), "{what}: {bad:?} in {out:?}");
    }
    assert!(table.contains("w?]52;c;ZXZpbA==?"), "{table}");
}

// ----- install and uninstall -----

/// Reads a HOME as the expected files spell it: `{HOME}` for the temporary HOME and
/// `{SHA256}` for a matching skill stamp.
fn normalised_tree(home: &Path) -> BTreeMap<String, String> {
    let home_s = home.to_str().unwrap();
    read_tree(home)
        .into_iter()
        .map(|(k, v)| (k, normalise_stamp(v).replace(home_s, "{HOME}")))
        .collect()
}

fn without_backups(mut t: BTreeMap<String, String>) -> BTreeMap<String, String> {
    t.retain(|k, _| !k.ends_with(".agent-hub.bak"));
    t
}

fn with_port(args: &[&str], port: &'static str) -> Vec<String> {
    args.iter()
        .map(|a| if *a == "46110" { port } else { a }.to_owned())
        .collect()
}

/// One agent through every state of `protocol/install/<agent>/` (README there): install into
/// the user's files; a second install (byte for byte nothing); the user's own keys added by
/// hand inside agent-hub's entries (`edited/`) and install again (nothing); install with a new
/// port (only the port changes, the user's keys stay); uninstall (the user's files back as
/// they were); uninstall again (nothing).
fn golden(agent: &str) {
    let dir = root().join("protocol/install").join(agent);
    let t = TempDir::new(agent);
    let home = &t.0;
    write_tree(home, &read_tree(&dir.join("before")));
    let token = token(home);
    let integrations = root().join("protocol/install/integrations");
    let integrations = integrations.to_str().unwrap();
    // An empty PATH: the agent is not "detected", which --agent does not require.
    let path_var = "/nonexistent";
    let before = read_tree(home);
    let args = install_args(&["--agent", agent], &token, integrations);

    // A dry run says in one line per file what would become of it; every file the install
    // writes is named, and no file's text is shown (issue 35: it ran to ~200 lines).
    let out = run(home, path_var, &[&args[..], &["--dry-run"]].concat());
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        !stdout.contains("\n+++ "),
        "no diff without --diff:\n{stdout}"
    );
    let expected = read_tree(&dir.join("after-install"));
    let home_s = home.to_str().unwrap();
    for (rel, text) in &expected {
        let text = text.replace("{HOME}", home_s);
        if rel.ends_with(".agent-hub.bak") || before.get(rel) == Some(&text) {
            continue;
        }
        let n = text.lines().count();
        let line = match before.get(rel) {
            None => format!("  would create ~/{rel} ({n} line"),
            Some(_) => format!("  would change ~/{rel} (+"),
        };
        assert!(stdout.contains(&line), "{line:?} missing:\n{stdout}");
    }
    assert!(
        stdout.ends_with("dry run: nothing was written (--diff shows each change in full)\n"),
        "{stdout}"
    );
    assert_eq!(read_tree(home), before, "a dry run writes nothing");

    let out = run(
        home,
        path_var,
        &[&args[..], &["--dry-run", "--diff"]].concat(),
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("\n+++ b/"),
        "the dry run with --diff shows a diff:\n{stdout}"
    );
    assert!(
        stdout.ends_with("dry run: nothing was written\n"),
        "{stdout}"
    );
    assert_eq!(read_tree(home), before, "a dry run writes nothing");

    let out = run(home, path_var, &args);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains(" added"), "{stdout}");
    assert!(
        stdout.contains("  next: "),
        "the trust steps are printed:\n{stdout}"
    );
    assert!(
        !stdout.contains("secret-token") && !stderr.contains("secret-token"),
        "the token never appears"
    );
    assert_tree(
        home,
        &dir.join("after-install"),
        &format!("{agent}: install"),
    );
    let installed = read_tree(home);
    // Every backup holds exactly the file as it was.
    for (rel, text) in &installed {
        if let Some(orig) = rel.strip_suffix(".agent-hub.bak") {
            assert_eq!(Some(text), before.get(orig), "{rel}");
        }
    }
    let second = |what: &str| {
        let snapshot = read_tree(home);
        let out = run(home, path_var, &args);
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stderr}");
        assert!(
            !stdout.contains(" added")
                && !stdout.contains(" updated")
                && !stdout.contains("backup:"),
            "{what}:\n{stdout}"
        );
        for f in snapshot
            .keys()
            .filter(|k| !k.ends_with(".agent-hub.bak") && !k.contains("SKILL.md"))
        {
            assert!(
                stdout.contains(&format!("  ~/{f}: unchanged\n")),
                "{what}: says {f} is unchanged:\n{stdout}"
            );
        }
        assert_eq!(read_tree(home), snapshot, "{what} changes nothing");
    };
    second("a second install");

    // The user adds keys of their own inside agent-hub's entries (those install recommends
    // among them), comments, and tunes a default; install again changes none of it.
    let edited = read_tree(&dir.join("edited"));
    assert!(!edited.is_empty(), "{agent}/edited/ is missing");
    let home_s = home.to_str().unwrap();
    for (rel, text) in &edited {
        assert!(
            installed.contains_key(rel),
            "edited/{rel} is not a file install wrote"
        );
        std::fs::write(home.join(rel), text.replace("{HOME}", home_s)).unwrap();
    }
    let edited_home = normalised_tree(home);
    second("install after the user's edits");

    let port_args = with_port(&args, "46111");
    let port_args: Vec<&str> = port_args.iter().map(String::as_str).collect();
    let out = run(home, path_var, &port_args);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains(" updated"), "{stdout}");
    assert!(stdout.contains("every other key in it kept"), "{stdout}");
    assert!(
        !stdout.contains("backup: ~/")
            || stdout.contains(" kept (it holds the file as it was before the first install)"),
        "{stdout}"
    );
    assert_tree(
        home,
        &dir.join("after-reinstall-port"),
        &format!("{agent}: install with a new port"),
    );
    // Only the port changed: every file is the edited one with the other port, and every
    // backup still holds the user's original. (The skills, wholly ours, quote 46110 in an
    // example too; the golden files cover them.)
    let now = normalised_tree(home);
    for (rel, text) in &edited_home {
        if rel.contains("/skills/agent-hub-") {
            continue;
        }
        if rel.ends_with(".agent-hub.bak") {
            assert_eq!(now.get(rel), Some(text), "{rel}: the first backup stays");
        } else {
            assert_eq!(
                now.get(rel),
                Some(&text.replace("46110", "46111")),
                "{rel}: only the port changes"
            );
        }
    }
    assert_eq!(now.len(), edited_home.len(), "no file added or removed");

    let installed = read_tree(home);
    let out = run(
        home,
        path_var,
        &["uninstall", "--agent", agent, "--dry-run", "--diff"],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains("\n--- a/"), "{stdout}");
    assert_eq!(read_tree(home), installed, "a dry run writes nothing");
    let out = run(
        home,
        path_var,
        &["uninstall", "--agent", agent, "--dry-run"],
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("  would change ~/") || stdout.contains("  would remove ~/"),
        "{stdout}"
    );
    assert!(!stdout.contains("\n--- a/"), "{stdout}");
    assert_eq!(read_tree(home), installed, "a dry run writes nothing");

    let out = run(home, path_var, &["uninstall", "--agent", agent]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(stdout.contains(" removed"), "{stdout}");
    assert!(!stdout.contains("next:"), "{stdout}");
    assert_tree(
        home,
        &dir.join("after-uninstall"),
        &format!("{agent}: uninstall"),
    );
    // Apart from the backups, uninstall gives back the files as they were before, and the
    // backups are the user's originals.
    let after = read_tree(home);
    assert_eq!(
        without_backups(after.clone()),
        before,
        "{agent}: uninstall reverses install"
    );
    for (rel, text) in &after {
        if let Some(orig) = rel.strip_suffix(".agent-hub.bak") {
            assert_eq!(Some(text), before.get(orig), "{rel}");
        }
    }
    assert!(
        !home.join(".agent-hub/installed.json").exists(),
        "uninstall forgets the agent's record"
    );

    let out = run(home, path_var, &["uninstall", "--agent", agent]);
    let (stdout, _) = text(&out);
    assert!(out.status.success());
    assert!(
        stdout.contains("not present") && !stdout.contains(" removed"),
        "{stdout}"
    );
}

#[test]
fn every_builtin_has_golden_files() {
    let reg = Registry::builtin();
    let names: Vec<&str> = reg.manifests().map(|m| m.name.as_str()).collect();
    assert_eq!(names, AGENTS);
    for a in AGENTS {
        let dir = root().join("protocol/install").join(a);
        for sub in [
            "before",
            "after-install",
            "edited",
            "after-reinstall-port",
            "after-uninstall",
        ] {
            assert!(dir.join(sub).is_dir(), "{}/{sub} is missing", dir.display());
        }
    }
}

#[test]
fn install_claude() {
    golden("claude");
}

#[test]
fn install_codex() {
    golden("codex");
}

#[test]
fn install_gemini() {
    golden("gemini");
}

#[test]
fn install_opencode() {
    golden("opencode");
}

#[test]
fn install_droid() {
    golden("droid");
}

/// `install --all` arguments without an identity: each agent gets its own.
fn all_args<'a>(extra: &[&'a str], integrations: &'a str) -> Vec<&'a str> {
    let mut a = vec!["install", "--all"];
    a.extend_from_slice(extra);
    a.extend(["--command", HUB_COMMAND, "--integrations-dir", integrations]);
    a
}

/// The `--as` value and token file an installed agent's MCP entry runs with.
fn mcp_identity(home: &Path, agent: &str) -> (String, String) {
    let read = |rel: &str| std::fs::read_to_string(home.join(rel)).unwrap();
    let args: Vec<String> = match agent {
        "codex" => {
            let t: toml::Table = read(".codex/config.toml").parse().unwrap();
            t["mcp_servers"]["agent-hub"]["args"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect()
        }
        _ => {
            let (rel, key) = match agent {
                "claude" => (".claude.json", "/mcpServers/agent-hub/args"),
                "gemini" => (".gemini/settings.json", "/mcpServers/agent-hub/args"),
                "opencode" => (".config/opencode/opencode.json", "/mcp/agent-hub/command"),
                _ => (".factory/mcp.json", "/mcpServers/agent-hub/args"),
            };
            let v = agent_hub_host::agents::jsonedit::value(&read(rel)).unwrap();
            v.pointer(key)
                .unwrap()
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_owned())
                .collect()
        }
    };
    let after = |flag: &str| {
        let i = args.iter().position(|a| a == flag).unwrap();
        args[i + 1].clone()
    };
    (after("--as"), after("--token-file"))
}

#[test]
fn install_all_gives_each_agent_its_own_identity_and_says_what_the_operator_must_do() {
    let t = TempDir::new("all");
    let home = &t.0;
    let bin = home.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for a in ["claude", "codex", "gemini", "opencode"] {
        fake_binary(&bin, a, "echo 1.0");
    }
    // One token exists already (the user made it); the others do not.
    let tokens = home.join(".agent-hub/tokens");
    std::fs::create_dir_all(&tokens).unwrap();
    std::fs::write(tokens.join("me-gemini.token"), "t\n").unwrap();
    let integrations = root().join("protocol/install/integrations");
    let path_var = format!("{}:/usr/bin:/bin", bin.display());
    let args = all_args(
        &["--as", "me", "--port", "46110"],
        integrations.to_str().unwrap(),
    );
    let out = run(home, &path_var, &args);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("droid: skipped, not found on PATH (droid)"),
        "{stdout}"
    );
    let mut seen = std::collections::BTreeSet::new();
    for a in ["claude", "codex", "gemini", "opencode"] {
        let name = format!("me-{a}");
        let file = tokens.join(format!("{name}.token"));
        assert_eq!(
            mcp_identity(home, a),
            (name.clone(), file.to_str().unwrap().to_owned()),
            "{a}"
        );
        assert!(seen.insert(name.clone()), "names are distinct");
        if a == "gemini" {
            assert!(
                stdout.contains(
                    "  identity \"me-gemini\", token file ~/.agent-hub/tokens/me-gemini.token\n"
                ),
                "{stdout}"
            );
            assert!(!stdout.contains("operator: me-gemini"), "{stdout}");
        } else {
            let shown = file.display();
            for want in [
                format!("  operator: {name}: the hub does not know this identity yet; its token file {shown} is missing."),
                format!("  operator:     agent-hub-server roster add {name} --config <the hub's config>\n"),
                format!("  operator:     {name} = \"<a new random token"),
                format!("(chmod 600 {shown}), and reloads the hub: kill -HUP <the hub's pid>\n"),
            ] {
                assert!(stdout.contains(&want), "{want}\n---\n{stdout}");
            }
        }
    }
    // The hook and the plugin carry the same identity as the MCP entry.
    let hooks = std::fs::read_to_string(home.join(".codex/hooks.json")).unwrap();
    assert!(hooks.contains("--as me-codex --token-file"), "{hooks}");
    let plugin =
        std::fs::read_to_string(home.join(".config/opencode/plugins/agent-hub.js")).unwrap();
    assert!(plugin.contains("as: \"me-opencode\""), "{plugin}");
    assert!(
        stdout.contains("identities: claude as me-claude, codex as me-codex, gemini as me-gemini, opencode as me-opencode (each its own queue)\n"),
        "{stdout}"
    );
    let files: Vec<String> = read_tree(home).into_keys().collect();
    assert_eq!(
        files,
        [
            ".claude.json",
            ".claude/settings.json",
            ".claude/skills/agent-hub-orchestrator/SKILL.md",
            ".claude/skills/agent-hub-resident/SKILL.md",
            ".codex/config.toml",
            ".codex/hooks.json",
            ".config/opencode/opencode.json",
            ".config/opencode/plugins/agent-hub.js",
            ".gemini/settings.json",
        ],
        "no backups: none of the files existed"
    );
    // Without a base, each agent is named after itself.
    let out = run(
        home,
        &path_var,
        &all_args(
            &["--port", "46110", "--dry-run"],
            integrations.to_str().unwrap(),
        ),
    );
    let (stdout, _) = text(&out);
    assert!(out.status.success());
    assert!(
        stdout.contains("identities: claude as claude, codex as codex"),
        "{stdout}"
    );

    let out = run(home, &path_var, &["uninstall", "--all"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("droid (Factory Droid):"),
        "uninstall --all visits every agent:\n{stdout}"
    );
    assert!(
        stdout.contains("  ~/.codex: folder removed (an install created it)\n"),
        "{stdout}"
    );
    assert_eq!(
        read_tree(home),
        BTreeMap::new(),
        "files that held only our entries are gone"
    );
    // Every folder install created is gone too; what is left is the test's own.
    let mut left: Vec<String> = std::fs::read_dir(home)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, [".agent-hub", "bin"]);
    assert!(!home.join(".agent-hub/installed.json").exists());
}

#[test]
fn install_all_refuses_one_token_file_for_several_agents() {
    let t = TempDir::new("all-one-token");
    let token = token(&t.0);
    let out = run(
        &t.0,
        "/nonexistent",
        &install_args(&["--agent", "claude", "--agent", "codex"], &token, "/x"),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).1.contains("--token-file names one agent's token; with several agents each gets its own <name>.token"),
        "{}",
        text(&out).1
    );
    assert_eq!(read_tree(&t.0), BTreeMap::new(), "nothing written");
}

/// A copy of the `agent-hub` binary beside a fake `agent-hub-server` that logs its argv and,
/// for `roster add NAME --config PATH`, writes `tokens/NAME.token` beside the config (whose
/// roster is beside it) — or fails for a name given in `fail`.
fn client_with_fake_server(dir: &Path, log: &Path, fail: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(dir).unwrap();
    let client = dir.join("agent-hub");
    std::fs::copy(BIN, &client).unwrap();
    let script = format!(
        "#!/bin/sh\nprintf '%s|' \"$@\" >> '{log}'\necho >> '{log}'\n[ \"$1 $2 $4\" = 'roster add --config' ] || exit 2\nif [ \"$3\" = '{fail}' ]; then echo \"roster: $3 is already on the roster\" >&2; exit 1; fi\nd=$(dirname \"$5\")/tokens\nmkdir -p \"$d\"\numask 077\necho \"tok-$3\" > \"$d/$3.token\"\necho \"added $3; reloaded the hub\"\n",
        log = log.display()
    );
    let server = dir.join("agent-hub-server");
    std::fs::write(&server, script).unwrap();
    std::fs::set_permissions(&server, std::fs::Permissions::from_mode(0o755)).unwrap();
    client
}

#[test]
fn install_with_a_hub_config_adds_missing_identities_through_roster_add() {
    let t = TempDir::new("all-config");
    let home = t.0.join("home");
    let hubdir = t.0.join("hub dir");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(&hubdir).unwrap();
    let config = hubdir.join("config.toml");
    let example = std::fs::read_to_string(root().join("config.example.toml")).unwrap();
    std::fs::write(&config, example.replace("port = 46110", "port = 46120")).unwrap();
    std::fs::write(hubdir.join("roster.toml"), "[agents]\nother = \"x\"\n").unwrap();
    let log = t.0.join("server.log");
    let client = client_with_fake_server(&t.0.join("bin"), &log, "codex");
    let bin = t.0.join("agents");
    std::fs::create_dir_all(&bin).unwrap();
    for a in ["claude", "codex", "gemini"] {
        fake_binary(&bin, a, "echo 1.0");
    }
    let path_var = format!("{}:/usr/bin:/bin", bin.display());
    let run_client = |args: &[&str]| {
        Command::new(&client)
            .args(args)
            .env("HOME", &home)
            .env("PATH", &path_var)
            .output()
            .unwrap()
    };
    let cfg = config.to_str().unwrap();
    let integrations = root().join("protocol/install/integrations");
    let integrations = integrations.to_str().unwrap();

    let out = run_client(&all_args(&["--config", cfg, "--dry-run"], integrations));
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains(&format!("  identity \"claude\": would run agent-hub-server roster add claude --config {cfg} (token file {}/tokens/claude.token)\n", hubdir.display())),
        "{stdout}"
    );
    assert!(!log.exists(), "a dry run runs nothing");

    let out = run_client(&all_args(&["--config", cfg], integrations));
    let (stdout, stderr) = text(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "codex failed:\n{stdout}\n{stderr}"
    );
    let calls = std::fs::read_to_string(&log).unwrap();
    assert_eq!(
        calls,
        format!("roster|add|claude|--config|{cfg}|\nroster|add|codex|--config|{cfg}|\nroster|add|gemini|--config|{cfg}|\n"),
        "argv words, one call per missing identity"
    );
    for a in ["claude", "gemini"] {
        let file = hubdir.join(format!("tokens/{a}.token"));
        assert!(file.is_file());
        assert_eq!(
            mcp_identity(&home, a),
            (a.to_owned(), file.to_str().unwrap().to_owned())
        );
        assert!(
            stdout.contains(&format!("  identity \"{a}\" added to the roster of {cfg} (token file {}, mode 600):\n    added {a}; reloaded the hub\n", file.display())),
            "{stdout}"
        );
    }
    // The port comes from the config.
    let claude = std::fs::read_to_string(home.join(".claude.json")).unwrap();
    assert!(claude.contains("\"46120\""), "{claude}");
    // codex: roster add failed; nothing of codex's was written, and the steps are printed.
    assert!(
        stderr.contains("codex: ")
            && stderr.contains("roster add codex failed")
            && stderr.contains("codex is already on the roster")
            && stderr.contains("nothing was changed for it"),
        "{stderr}"
    );
    assert!(!home.join(".codex").exists());
    assert!(
        stdout.contains(&format!(
            "  operator:     agent-hub-server roster add codex --config {cfg}\n"
        )),
        "{stdout}"
    );

    // A second run finds the token files and adds nothing.
    std::fs::remove_file(&log).unwrap();
    let out = run_client(&all_args(&["--config", cfg], integrations));
    let (stdout, _) = text(&out);
    assert!(
        stdout.contains("  identity \"claude\", token file "),
        "{stdout}"
    );
    let calls = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(
        calls,
        format!("roster|add|codex|--config|{cfg}|\n"),
        "only the missing one"
    );
}

#[test]
fn a_backup_already_there_is_the_users_original_and_is_never_overwritten() {
    let t = TempDir::new("old-backup");
    let home = &t.0;
    let token = token(home);
    std::fs::create_dir_all(home.join(".gemini")).unwrap();
    let settings = home.join(".gemini/settings.json");
    let backup = home.join(".gemini/settings.json.agent-hub.bak");
    std::fs::write(&settings, "{\n  \"theme\": \"now\"\n}\n").unwrap();
    std::fs::write(&backup, "{\n  \"theme\": \"the user's original\"\n}\n").unwrap();
    let args = install_args(&["--agent", "gemini"], &token, "/x");
    let out = run(home, "/nonexistent", &args);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("  backup: ~/.gemini/settings.json.agent-hub.bak kept (it holds the file as it was before the first install)\n"),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read_to_string(&backup).unwrap(),
        "{\n  \"theme\": \"the user's original\"\n}\n"
    );
    let out = run(
        home,
        "/nonexistent",
        &with_port(&args, "46111")
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert!(out.status.success());
    assert_eq!(
        std::fs::read_to_string(&backup).unwrap(),
        "{\n  \"theme\": \"the user's original\"\n}\n"
    );
    let out = run(home, "/nonexistent", &["uninstall", "--agent", "gemini"]);
    assert!(out.status.success());
    assert_eq!(
        std::fs::read_to_string(&settings).unwrap(),
        "{\n  \"theme\": \"now\"\n}\n"
    );
    assert!(home.join(".gemini").is_dir(), "a folder the user had stays");
}

#[test]
fn crlf_configs_with_the_users_keys_round_trip() {
    let t = TempDir::new("crlf");
    let home = &t.0;
    let token = token(home);
    std::fs::create_dir_all(home.join(".codex")).unwrap();
    let config = home.join(".codex/config.toml");
    let original = "model = \"o3\"\r\n";
    std::fs::write(&config, original).unwrap();
    let args = install_args(&["--agent", "codex"], &token, "/x");
    assert!(run(home, "/nonexistent", &args).status.success());
    // The user adds the key install recommends, CRLF like the rest of the file.
    let installed = std::fs::read_to_string(&config).unwrap();
    assert!(
        !installed.replace("\r\n", "").contains('\n'),
        "{installed:?}"
    );
    let edited = installed.replace(
        "[mcp_servers.agent-hub]\r\n",
        "[mcp_servers.agent-hub]\r\ndefault_tools_approval_mode = \"approve\" # mine\r\n",
    );
    std::fs::write(&config, &edited).unwrap();
    let port = with_port(&args, "46111");
    let out = run(
        home,
        "/nonexistent",
        &port.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    assert!(out.status.success(), "{}", text(&out).1);
    assert_eq!(
        std::fs::read_to_string(&config).unwrap(),
        edited.replace("\"46110\"", "\"46111\"")
    );
    assert!(
        run(home, "/nonexistent", &["uninstall", "--agent", "codex"])
            .status
            .success()
    );
    assert_eq!(std::fs::read_to_string(&config).unwrap(), original);
}

// ----- skills -----

fn skill_path(home: &Path, name: &str) -> PathBuf {
    home.join(".claude/skills").join(name).join("SKILL.md")
}

#[test]
fn skills_are_placed_once_and_an_edited_skill_is_never_overwritten_or_removed() {
    let t = TempDir::new("skills");
    let home = &t.0;
    let token = token(home);
    let args = install_args(&["--agent", "claude"], &token, "/nonexistent");
    let orchestrator = skill_path(home, "agent-hub-orchestrator");
    let resident = skill_path(home, "agent-hub-resident");

    let out = run(
        home,
        "/nonexistent",
        &[&args[..], &["--dry-run", "--diff"]].concat(),
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("--- /dev/null\n+++ b/.claude/skills/agent-hub-orchestrator/SKILL.md\n"),
        "the dry run shows the skill it would create:\n{stdout}"
    );
    let out = run(home, "/nonexistent", &[&args[..], &["--dry-run"]].concat());
    let (stdout, _) = text(&out);
    assert!(
        stdout.contains("  would create ~/.claude/skills/agent-hub-orchestrator/SKILL.md ("),
        "the summary names the skill it would create:\n{stdout}"
    );
    assert!(!orchestrator.exists());

    let out = run(home, "/nonexistent", &args);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    for name in ["agent-hub-orchestrator", "agent-hub-resident"] {
        assert!(
            stdout.contains(&format!(
                "  ~/.claude/skills/{name}/SKILL.md: skill {name} added\n"
            )),
            "{stdout}"
        );
    }
    let installed = read_tree(home);
    let out = run(home, "/nonexistent", &args);
    let (stdout, _) = text(&out);
    assert!(out.status.success());
    assert!(
        stdout.contains(
            "  ~/.claude/skills/agent-hub-resident/SKILL.md: skill agent-hub-resident already present\n"
        ),
        "{stdout}"
    );
    assert_eq!(
        read_tree(home),
        installed,
        "a second install changes nothing"
    );

    // The user makes the resident skill their own.
    let edited = std::fs::read_to_string(&resident).unwrap() + "\nAlways answer in French.\n";
    std::fs::write(&resident, &edited).unwrap();
    let kept = "  ~/.claude/skills/agent-hub-resident/SKILL.md: skill agent-hub-resident was edited after it was installed, or was not written by agent-hub; left as it is";
    let out = run(home, "/nonexistent", &args);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains(&format!(
            "{kept} (move it away and install again to get this version)\n"
        )),
        "{stdout}"
    );
    assert_eq!(std::fs::read_to_string(&resident).unwrap(), edited);
    assert!(!home
        .join(".claude/skills/agent-hub-resident/SKILL.md.agent-hub.bak")
        .exists());
    // An install with another port updates the unedited skill only.
    let mut other_port = args.clone();
    let at = other_port.iter().position(|a| *a == "46110").unwrap();
    other_port[at] = "46111";
    let out = run(home, "/nonexistent", &other_port);
    let (stdout, _) = text(&out);
    assert!(
        stdout.contains(
            "~/.claude/skills/agent-hub-orchestrator/SKILL.md: skill agent-hub-orchestrator updated\n"
        ),
        "{stdout}"
    );
    assert!(std::fs::read_to_string(&orchestrator)
        .unwrap()
        .contains("--port 46111`"));
    assert_eq!(std::fs::read_to_string(&resident).unwrap(), edited);

    let out = run(home, "/nonexistent", &["uninstall", "--agent", "claude"]);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains(
            "  ~/.claude/skills/agent-hub-orchestrator/SKILL.md: skill agent-hub-orchestrator removed\n"
        ),
        "{stdout}"
    );
    assert!(stdout.contains(&format!("{kept}\n")), "{stdout}");
    assert!(!orchestrator.exists());
    // Install created the skill, so the port change kept no backup of it (there is no
    // original of the user's) and its folder goes with it.
    assert!(!orchestrator.parent().unwrap().exists());
    let left: Vec<String> = read_tree(home).into_keys().collect();
    assert_eq!(left, [".claude/skills/agent-hub-resident/SKILL.md"]);
    assert!(
        !stdout.contains("  ~/.claude: folder removed"),
        "~/.claude still holds the edited skill:\n{stdout}"
    );
    assert!(home.join(".claude/skills/agent-hub-resident").is_dir());
    assert_eq!(std::fs::read_to_string(&resident).unwrap(), edited);
}

#[test]
fn an_older_skill_of_ours_is_updated_with_a_backup_and_no_skills_leaves_skills_alone() {
    let t = TempDir::new("skills-old");
    let home = &t.0;
    let token = token(home);
    let args = install_args(&["--agent", "claude"], &token, "/nonexistent");
    let orchestrator = skill_path(home, "agent-hub-orchestrator");
    let older = install::stamp_skill(
        "---\nname: agent-hub-orchestrator\ndescription: an older version\n---\n\nOld text.\n"
            .to_owned(),
    );
    std::fs::create_dir_all(orchestrator.parent().unwrap()).unwrap();
    std::fs::write(&orchestrator, &older).unwrap();

    let out = run(
        home,
        "/nonexistent",
        &[&args[..], &["--no-skills"]].concat(),
    );
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains("  ~/.claude/skills: skills not placed (--no-skills)\n"),
        "{stdout}"
    );
    assert!(home.join(".claude.json").exists(), "the rest is installed");
    assert_eq!(std::fs::read_to_string(&orchestrator).unwrap(), older);
    assert!(!skill_path(home, "agent-hub-resident").exists());

    let out = run(home, "/nonexistent", &args);
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stdout.contains(
            "  ~/.claude/skills/agent-hub-orchestrator/SKILL.md: skill agent-hub-orchestrator updated\n"
        ),
        "{stdout}"
    );
    let backup = home.join(".claude/skills/agent-hub-orchestrator/SKILL.md.agent-hub.bak");
    assert!(
        stdout
            .contains("  backup: ~/.claude/skills/agent-hub-orchestrator/SKILL.md.agent-hub.bak\n"),
        "{stdout}"
    );
    assert_eq!(std::fs::read_to_string(&backup).unwrap(), older);
    let now = std::fs::read_to_string(&orchestrator).unwrap();
    assert!(install::skill_is_pristine(&now));
    assert!(
        now.contains("`$HUB` is `--as worker --token-file "),
        "{now}"
    );

    let out = run(home, "/nonexistent", &["uninstall", "--agent", "claude"]);
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(!orchestrator.exists());
    assert!(
        backup.exists(),
        "uninstall never touches backups; the folder stays for it"
    );
    assert!(!skill_path(home, "agent-hub-resident")
        .parent()
        .unwrap()
        .exists());
}

#[test]
fn a_file_that_is_not_json_fails_that_agent_and_is_left_alone() {
    let t = TempDir::new("broken");
    let home = &t.0;
    std::fs::write(home.join(".claude.json"), "{ \"a\": 1,, }").unwrap();
    let out = run(
        home,
        "/nonexistent",
        &[
            "install",
            "--agent",
            "claude",
            "--agent",
            "codex",
            "--port",
            "46110",
            "--command",
            HUB_COMMAND,
        ],
    );
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("claude: ~/.claude.json: not valid JSON at line 1, column 10: expected a key or }; nothing was changed for it"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(home.join(".claude.json")).unwrap(),
        "{ \"a\": 1,, }"
    );
    assert!(
        !home.join(".claude/settings.json").exists(),
        "nothing of claude's is written"
    );
    assert!(
        home.join(".codex/config.toml").exists(),
        "codex still installed:\n{stdout}"
    );
}

#[test]
fn usage_errors() {
    let t = TempDir::new("usage");
    let token = token(&t.0);
    let out = run(
        &t.0,
        "/nonexistent",
        &install_args(&["--agent", "nosuch"], &token, "/x"),
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out)
        .1
        .contains("no agent named \"nosuch\" (known: claude, codex, gemini, opencode, droid)"));
    let out = run(
        &t.0,
        "/nonexistent",
        &["install", "--as", "w", "--token-file", "t", "--port", "1"],
    );
    assert_eq!(out.status.code(), Some(1), "--agent or --all is required");
    let out = run(
        &t.0,
        "/nonexistent",
        &install_args(&["--all", "--agent", "claude"], &token, "/x"),
    );
    assert_eq!(out.status.code(), Some(1), "not both");
    let mut bad_name = install_args(&["--agent", "claude"], &token, "/x");
    bad_name[4] = "a b";
    let out = run(&t.0, "/nonexistent", &bad_name);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out).1.contains("--as \"a b\" holds ' '"),
        "{}",
        text(&out).1
    );
    assert_eq!(read_tree(&t.0), BTreeMap::new());
}

#[test]
fn symlinked_configs_are_written_through_and_keep_their_link() {
    let t = TempDir::new("symlink");
    let home = &t.0;
    let dotfiles = home.join("dotfiles");
    std::fs::create_dir_all(&dotfiles).unwrap();
    std::fs::write(dotfiles.join("claude.json"), "{\n  \"x\": 1\n}\n").unwrap();
    std::os::unix::fs::symlink(dotfiles.join("claude.json"), home.join(".claude.json")).unwrap();
    let token = token(home);
    let out = run(
        home,
        "/nonexistent",
        &install_args(&["--agent", "claude"], &token, "/x"),
    );
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(std::fs::symlink_metadata(home.join(".claude.json"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(std::fs::read_to_string(dotfiles.join("claude.json"))
        .unwrap()
        .contains("\"agent-hub\""));
}
