//! Manifest parsing and checking (`agents::manifest`): the built-ins, the seed's example as
//! written, and every refusal.

use super::*;

#[test]
fn every_builtin_parses_and_is_named_after_its_file() {
    let (ok, bad) = builtins();
    assert!(bad.is_empty(), "{bad:?}");
    let names: Vec<&str> = ok.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["claude", "codex", "gemini", "opencode", "droid"]);
    for (m, (file, _)) in ok.iter().zip(BUILTIN) {
        assert_eq!(format!("{}.toml", m.name), file);
    }
}

#[test]
fn builtins_match_the_facts_file() {
    let (ok, _) = builtins();
    let get = |n: &str| ok.iter().find(|m| m.name == n).unwrap().clone();
    let mcp = |m: &Manifest| m.install.mcp.as_ref().map(|c| (c.path.clone(), c.format));
    let claude = get("claude");
    assert_eq!(
        mcp(&claude),
        Some(("~/.claude.json".into(), Some(McpFormat::ClaudeJson)))
    );
    assert_eq!(claude.install.hook, HookKind::ClaudeStop);
    assert_eq!(
        claude.install.hook_config.as_deref(),
        Some("~/.claude/settings.json")
    );
    assert_eq!(claude.deliver, DeliverMode::StopHook);
    let codex = get("codex");
    assert_eq!(
        mcp(&codex),
        Some(("~/.codex/config.toml".into(), Some(McpFormat::CodexToml)))
    );
    assert_eq!(
        codex.install.hook_config.as_deref(),
        Some("~/.codex/hooks.json")
    );
    let gemini = get("gemini");
    assert_eq!(gemini.install.hook, HookKind::GeminiAfterAgent);
    assert_eq!(gemini.run.acp, ["gemini", "--acp"]);
    // Each ACP built-in names the session mode where it asks (docs/acp.md "Session modes").
    let asks = |m: &Manifest| m.run.ask_modes.clone().unwrap_or_default();
    assert_eq!(asks(&get("claude")), ["default"]);
    assert_eq!(asks(&get("codex")), ["read-only"]);
    assert_eq!(asks(&gemini), ["default"]);
    assert_eq!(asks(&get("opencode")), ["build", "plan"]);
    assert_eq!(
        get("droid").run.ask_modes,
        None,
        "not verified: the default list"
    );
    let opencode = get("opencode");
    assert_eq!(
        mcp(&opencode),
        Some((
            "~/.config/opencode/opencode.json".into(),
            Some(McpFormat::OpencodeJson)
        ))
    );
    assert_eq!(opencode.deliver, DeliverMode::PluginEvent);
    assert_eq!(opencode.run.acp, ["opencode", "acp"]);
    let droid = get("droid");
    assert_eq!(
        mcp(&droid),
        Some(("~/.factory/mcp.json".into(), Some(McpFormat::DroidJson)))
    );
    assert_eq!(claude.canonical_tool("Bash"), Some(CanonicalTool::Shell));
    assert_eq!(claude.canonical_tool("MultiEdit"), None);
}

#[test]
fn errors_name_the_key() {
    let text = include_str!("../builtin/claude.toml")
        .replace("\"claude\", \"-p\"", "\"claude\", \"-p;id\"");
    let e = Manifest::parse("x.toml", &text).unwrap_err();
    assert_eq!(e.key, "run.headless[1]");
    assert!(e.problem.contains("';'"), "{e}");
    assert!(e.to_string().starts_with("x.toml: run.headless[1]: "));
}

#[test]
fn ask_modes_are_optional_and_checked() {
    let base = include_str!("../builtin/claude.toml");
    let line = "ask_modes = [\"default\"]";
    assert!(base.contains(line));
    let without = base.replace(line, "");
    assert_eq!(Manifest::parse("x", &without).unwrap().run.ask_modes, None);
    let two = base.replace(line, "ask_modes = [\"ask\", \"default\"]");
    assert_eq!(
        Manifest::parse("x", &two).unwrap().run.ask_modes,
        Some(vec!["ask".to_owned(), "default".to_owned()])
    );
    for (bad, key) in [
        ("ask_modes = \"default\"", "run.ask_modes"),
        ("ask_modes = [3]", "run.ask_modes[0]"),
        ("ask_modes = [\"\"]", "run.ask_modes"),
        ("ask_modes = [\"a\\u001b[2J\"]", "run.ask_modes"),
    ] {
        let e = Manifest::parse("x", &base.replace(line, bad)).unwrap_err();
        assert_eq!(e.key, key, "{bad}: {e}");
    }
}

/// `run.reports` (issue 38 design §1): optional, each word checked; the ACP mode reports what
/// it says (nothing when absent), a headless run what its format's parser reads.
#[test]
fn reports_are_optional_checked_and_headless_reports_its_format() {
    use crate::agents::runnable::Delegate;
    use agent_hub_proto::acp::Reports;
    let base = include_str!("../builtin/claude.toml");
    let line = "reports = [\"tokens\", \"cost\", \"context\"]";
    assert!(base.contains(line));
    let claude = Manifest::parse("x", base).unwrap();
    assert_eq!(claude.reports(Delegate::Acp), Reports::ALL);
    let headless = claude.reports(Delegate::Headless);
    assert_eq!(
        headless.to_string(),
        "tokens,cost",
        "claude-json: no context"
    );
    let without = Manifest::parse("x", &base.replace(line, "")).unwrap();
    assert_eq!(without.reports(Delegate::Acp), Reports::NONE);
    assert_eq!(without.reports(Delegate::No).to_string(), "-");
    let gemini = Manifest::parse("x", include_str!("../builtin/gemini.toml")).unwrap();
    assert_eq!(gemini.reports(Delegate::Acp).to_string(), "tokens");
    for (bad, key) in [
        ("reports = \"tokens\"", "run.reports"),
        ("reports = [\"money\"]", "run.reports"),
        ("reports = [1]", "run.reports[0]"),
    ] {
        let e = Manifest::parse("x", &base.replace(line, bad)).unwrap_err();
        assert_eq!(e.key, key, "{bad}: {e}");
    }
}

#[test]
fn the_seed_delivery_name_is_accepted() {
    let text = include_str!("../builtin/claude.toml")
        .replace("mode = \"stop-hook\"", "mode = \"claude-stop-hook\"");
    assert_eq!(
        Manifest::parse("x", &text).unwrap().deliver,
        DeliverMode::StopHook
    );
}

/// The seed's §3 example, verbatim (protocol/manifests/valid/opencode.toml).
const SEED: &str = include_str!("../../../../../protocol/manifests/valid/opencode.toml");

/// A manifest in the seed's layout with `[install]` replaced by `install`.
fn with_install(install: &str, mode: &str) -> String {
    let head = &SEED[..SEED.find("[deliver]").unwrap()];
    format!("{head}[deliver]\nmode = \"{mode}\"\n\n[install]\n{install}")
}

#[test]
fn the_seed_manifest_loads_with_the_documented_defaults() {
    let m = Manifest::parse("seed.toml", SEED).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.name, "opencode");
    assert_eq!(m.source, "seed.toml");
    assert_eq!(m.deliver, DeliverMode::Pull);
    assert_eq!(m.run.acp, ["opencode", "acp"]);
    assert!(m.run.headless.is_empty());
    assert_eq!(m.run.outcome, Outcome::ExitCode);
    assert_eq!(m.observe.sessions, Sessions::None);
    assert_eq!(m.observe.transcript, Transcript::None);
    let mcp = m.install.mcp.as_ref().unwrap();
    assert_eq!(mcp.path, "~/.config/opencode/opencode.json");
    assert_eq!(mcp.format, Some(McpFormat::OpencodeJson), "inferred");
    assert_eq!(m.install.hook, HookKind::None);
    assert_eq!(m.install.hook_config, None);
    assert_eq!(m.install.skills_dir, None);
    assert!(m.install.trust.is_empty());
    assert!(m.tools.is_empty());
    assert_eq!(m.ready_to_install(), Ok(()));
}

#[test]
fn every_builtin_config_file_infers_the_format_it_names() {
    let (ok, _) = builtins();
    for m in ok {
        let mcp = m.install.mcp.unwrap();
        assert_eq!(infer_mcp_format(&mcp.path), mcp.format, "{}", m.name);
    }
    for (path, want) in [
        ("/srv/work/.claude.json", Some(McpFormat::ClaudeJson)),
        ("/repo/.mcp.json", Some(McpFormat::ClaudeJson)),
        ("/repo/.codex/config.toml", Some(McpFormat::CodexToml)),
        ("/repo/.gemini/settings.json", Some(McpFormat::GeminiJson)),
        (
            "~/.config/opencode/opencode.jsonc",
            Some(McpFormat::OpencodeJson),
        ),
        ("/repo/opencode.json", Some(McpFormat::OpencodeJson)),
        ("/repo/.factory/mcp.json", Some(McpFormat::DroidJson)),
        // Names several agents use with different layouts, and bare extensions.
        ("~/.claude/settings.json", None),
        ("~/.x/settings.json", None),
        ("~/.cursor/mcp.json", None),
        ("/srv/codex-home/config.toml", None),
        ("~/.x/x.toml", None),
        ("~/.x/x.json", None),
        ("~/.x/not-opencode.json", None),
    ] {
        assert_eq!(infer_mcp_format(path), want, "{path}");
    }
}

#[test]
fn a_given_mcp_format_wins_over_the_file_name() {
    let text = with_install(
        "mcp_config = \"~/.gemini/settings.json\"\nmcp_format = \"claude-json\"\nskills_dir = \"\"\n",
        "pull",
    );
    let m = Manifest::parse("x.toml", &text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.install.mcp.unwrap().format, Some(McpFormat::ClaudeJson));
}

#[test]
fn an_unknown_mcp_format_loads_and_install_asks_for_it_naming_the_file() {
    let text = with_install(
        "mcp_config = \"~/.x/config.json\"\nskills_dir = \"\"\n",
        "pull",
    );
    let m = Manifest::parse("/m/x.toml", &text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.install.mcp.as_ref().unwrap().format, None);
    let e = m.ready_to_install().unwrap_err();
    assert_eq!(e.source, "/m/x.toml");
    assert_eq!(e.key, "install.mcp_format");
    assert!(e.problem.contains("~/.x/config.json"), "{e}");
    assert!(e.problem.contains("opencode-json"), "{e}");
    assert_eq!(m.mcp_format_missing(), Some(e));
}

#[test]
fn a_mode_without_its_hook_loads_and_install_asks_for_the_hook() {
    for (mode, names) in [
        ("stop-hook", "stop-style"),
        ("plugin-event", "opencode-plugin"),
    ] {
        let text = with_install(
            "mcp_config = \"~/.config/opencode/opencode.json\"\nskills_dir = \"\"\n",
            mode,
        );
        let m = Manifest::parse("/m/x.toml", &text).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(m.install.hook, HookKind::None);
        let e = m.ready_to_install().unwrap_err();
        assert_eq!(
            (e.source.as_str(), e.key.as_str()),
            ("/m/x.toml", "install.hook")
        );
        assert!(e.problem.contains(names), "{e}");
        assert!(e.problem.contains("add hook and hook_config"), "{e}");
    }
    // Terminal delivery needs no hook.
    let text = with_install("mcp_config = \"\"\nskills_dir = \"\"\n", "terminal");
    let m = Manifest::parse("x", &text).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m.ready_to_install(), Ok(()));
}

#[test]
fn a_hook_config_without_a_hook_is_refused() {
    let text = with_install(
        "mcp_config = \"\"\nhook_config = \"~/.x/settings.json\"\nskills_dir = \"\"\n",
        "pull",
    );
    let e = Manifest::parse("x", &text).unwrap_err();
    assert_eq!(e.key, "install.hook_config");
}

#[test]
fn names() {
    for ok in ["claude", "my-agent", "a1", "9x", "a_b"] {
        assert!(valid_name(ok), "{ok}");
    }
    for bad in ["", "Claude", "-x", "_x", "a b", "a.b", &"a".repeat(33)] {
        assert!(!valid_name(bad), "{bad}");
    }
}
