//! `runnable`: hostile names, the ACP/headless choice and its fallback, PATH resolution, and
//! manifests that try to smuggle a program or an argument through.

use super::*;
use crate::agents::registry::Origin;
use std::path::{Path, PathBuf};

fn tmp(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("agent-hub-runnable-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Puts executables named `names` in `dir`/bin; returns that folder as a PATH.
fn bin(dir: &Path, names: &[&str]) -> String {
    use std::os::unix::fs::PermissionsExt;
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for n in names {
        let p = bin.join(n);
        std::fs::write(&p, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    bin.display().to_string()
}

fn manifest(name: &str, acp: &str, headless: &str) -> Manifest {
    let text = format!(
        "name = {name:?}\ndisplay = \"T\"\nbinaries = [\"{name}\"]\n\
         [observe]\nsessions = \"none\"\ntranscript = \"none\"\n\
         [run]\nacp = {acp}\nheadless = {headless}\noutcome = \"exit-code\"\n\
         [deliver]\nmode = \"pull\"\n\
         [install]\nmcp_config = \"\"\nhook = \"none\"\nhook_config = \"\"\nskills_dir = \"\"\ntrust = []\n"
    );
    Manifest::parse("test.toml", &text).unwrap_or_else(|e| panic!("{e}"))
}

fn registry(ms: Vec<Manifest>) -> Registry {
    Registry {
        agents: ms
            .into_iter()
            .map(|m| (m, Origin::File(PathBuf::from("/t.toml"))))
            .collect(),
        problems: Vec::new(),
        refused: Vec::new(),
        failed_folders: Vec::new(),
    }
}

#[test]
fn hostile_names_are_refused_before_any_lookup() {
    let dir = tmp("hostile");
    // A manifest exists for every plausible target, and `sh` is on PATH: still refused.
    let path = bin(&dir, &["sh", "claude", "x"]);
    let reg = registry(vec![
        manifest("claude", "[\"claude\"]", "[]"),
        manifest("x", "[\"x\"]", "[]"),
    ]);
    let long = "a".repeat(65);
    let hostile = [
        "",
        "/bin/sh",
        "../x",
        "./x",
        "x/..",
        "..",
        ".",
        ".x",
        "-x",
        "--help",
        "claude --foo",
        "claude\0",
        "claude\n",
        " claude",
        "Claude",
        "CLAUDE",
        "clau$de",
        "~/x",
        "x;sh",
        "x|sh",
        "$(sh)",
        "`sh`",
        "claudé",
        long.as_str(),
    ];
    for name in hostile {
        match resolve(&reg, name, &path) {
            Err(RunnableError::BadName(why)) => {
                let shown = RunnableError::BadName(why).to_string();
                assert!(
                    name.len() < 2 || !shown.contains(name),
                    "a refused name is never echoed: {shown}"
                );
            }
            other => panic!("{name:?}: {other:?}"),
        }
        assert!(check_name(name).is_err(), "{name:?}");
    }
    // Well-formed but not a manifest name (dots are never in one), or over its 32 bytes.
    for name in ["claude.x", &"a".repeat(33)] {
        assert!(matches!(
            resolve(&reg, name, &path),
            Err(RunnableError::BadName(_))
        ));
    }
    assert_eq!(
        resolve(&reg, "sh", &path),
        Err(RunnableError::Unknown("sh".into())),
        "a binary on PATH is not an agent"
    );
    assert!(resolve(&reg, "claude", &path).is_ok());
}

#[test]
fn acp_first_with_an_absolute_program() {
    let dir = tmp("acp");
    let path = bin(&dir, &["fake-acp", "fake"]);
    let reg = registry(vec![manifest(
        "fake",
        "[\"fake-acp\", \"--acp\"]",
        "[\"fake\", \"-p\", \"{prompt}\"]",
    )]);
    let spec = resolve(&reg, "fake", &path).unwrap();
    assert_eq!(spec.mode, Delegate::Acp);
    assert_eq!(
        spec.argv,
        vec![format!("{path}/fake-acp"), "--acp".to_owned()]
    );
    assert!(spec.argv[0].starts_with('/'));
    assert_eq!(list(&reg, &path), vec![("fake".to_owned(), Delegate::Acp)]);
}

#[test]
fn headless_is_the_fallback_when_the_acp_program_is_missing() {
    let dir = tmp("fallback");
    let path = bin(&dir, &["fake"]);
    let reg = registry(vec![manifest(
        "fake",
        "[\"fake-acp\"]",
        "[\"fake\", \"-p\", \"{prompt}\"]",
    )]);
    let spec = resolve(&reg, "fake", &path).unwrap();
    assert_eq!(spec.mode, Delegate::Headless);
    assert_eq!(
        spec.argv,
        vec![format!("{path}/fake"), "-p".into(), "{prompt}".into()]
    );
    assert_eq!(spec.outcome, Outcome::ExitCode);
    // The template renders with the prompt as one element, never through a shell.
    let argv = argv::render(&spec.argv, "hi; rm -rf /").unwrap();
    assert_eq!(argv[2], "hi; rm -rf /");
    // A manifest without ACP at all falls back the same way.
    let reg = registry(vec![manifest("fake", "[]", "[\"fake\", \"{prompt}\"]")]);
    assert_eq!(
        resolve(&reg, "fake", &path).unwrap().mode,
        Delegate::Headless
    ); // The columns and the relay cards say the same: ACP cannot run, headless can.
    let m = manifest("fake", "[\"fake-acp\"]", "[\"fake\", \"{prompt}\"]");
    assert_eq!(
        modes(&m, &path),
        Modes {
            acp: false,
            headless: true
        }
    );
    let both = manifest("fake", "[\"fake\"]", "[\"fake\", \"{prompt}\"]");
    assert_eq!(
        modes(&both, &path),
        Modes {
            acp: true,
            headless: true
        }
    );
    assert_eq!(delegate_mode(&both, &path), Delegate::Acp, "ACP first");
    assert_eq!(modes(&both, "/nonexistent"), Modes::default());
}

#[test]
fn an_agent_with_nothing_to_run_is_not_runnable_and_says_why() {
    let dir = tmp("none");
    let path = bin(&dir, &[]);
    let reg = registry(vec![
        manifest("gone", "[\"gone-acp\"]", "[\"gone\", \"{prompt}\"]"),
        manifest("bare", "[]", "[]"),
    ]);
    match resolve(&reg, "gone", &path) {
        Err(RunnableError::NotRunnable { agent, why }) => {
            assert_eq!(agent, "gone");
            assert!(why.contains("run.acp's gone-acp is not on PATH"), "{why}");
            assert!(why.contains("run.headless's gone is not on PATH"), "{why}");
        }
        other => panic!("{other:?}"),
    }
    match resolve(&reg, "bare", &path) {
        Err(RunnableError::NotRunnable { why, .. }) => {
            assert!(why.contains("neither run.acp nor run.headless"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        list(&reg, &path),
        vec![
            ("gone".to_owned(), Delegate::No),
            ("bare".to_owned(), Delegate::No)
        ]
    );
}

#[test]
fn relative_path_entries_never_supply_the_program() {
    // A repository planting `./fake-acp` must not become the agent: `.` and relative PATH
    // entries are skipped, as `agent-hub agents` skips them.
    let dir = tmp("relative");
    bin(&dir, &["fake-acp"]);
    let reg = registry(vec![manifest("fake", "[\"fake-acp\"]", "[]")]);
    let cwd_relative = "bin:.:";
    assert!(matches!(
        resolve(&reg, "fake", cwd_relative),
        Err(RunnableError::NotRunnable { .. })
    ));
}

#[test]
fn hostile_manifests_never_parse_or_never_resolve() {
    // What a manifest cannot say: each is refused at parse, with its key.
    for (acp, headless, key) in [
        ("[\"sh -c x\"]", "[]", "run.acp[0]"),
        ("[\"fake\", \"$(id)\"]", "[]", "run.acp[1]"),
        ("[\"fake\", \"{prompt}\"]", "[]", "run.acp[1]"),
        ("[\"../fake\"]", "[]", "run.acp[0]"),
        ("[\"-fake\"]", "[]", "run.acp[0]"),
        ("[]", "[\"fake\", \"--p={prompt}\"]", "run.headless[1]"),
        (
            "[]",
            "[\"fake\", \"{prompt}\", \"{prompt}\"]",
            "run.headless[2]",
        ),
        ("[]", "[\"fake\"]", "run.headless"),
    ] {
        let text = format!(
            "name = \"fake\"\ndisplay = \"T\"\nbinaries = [\"fake\"]\n\
             [observe]\nsessions = \"none\"\ntranscript = \"none\"\n\
             [run]\nacp = {acp}\nheadless = {headless}\noutcome = \"exit-code\"\n\
             [deliver]\nmode = \"pull\"\n\
             [install]\nmcp_config = \"\"\nhook = \"none\"\nhook_config = \"\"\nskills_dir = \"\"\ntrust = []\n"
        );
        let e = Manifest::parse("t.toml", &text).expect_err(acp);
        assert_eq!(e.key, key, "{acp} {headless}: {e}");
    }
    // A manifest built by hand (never parsed) that holds a shell line: still refused here.
    let dir = tmp("handbuilt");
    let path = bin(&dir, &["fake"]);
    let mut m = manifest("fake", "[\"fake\"]", "[]");
    m.run.acp = vec!["fake".into(), "; rm -rf ~".into()];
    let reg = registry(vec![m]);
    match resolve(&reg, "fake", &path) {
        Err(RunnableError::BadManifest { why, .. }) => {
            assert!(why.starts_with("run.acp[1]"), "{why}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(list(&reg, &path), vec![("fake".to_owned(), Delegate::No)]);
}

#[test]
fn an_absolute_program_in_the_manifest_is_used_as_is_when_executable() {
    let dir = tmp("absolute");
    let path = bin(&dir, &["fake-acp"]);
    let program = format!("{path}/fake-acp");
    let reg = registry(vec![manifest("fake", &format!("[{program:?}]"), "[]")]);
    let spec = resolve(&reg, "fake", "/nonexistent").unwrap();
    assert_eq!(spec.argv, vec![program]);
}

#[test]
fn the_builtins_resolve_by_name() {
    let dir = tmp("builtins");
    let path = bin(&dir, &["claude", "codex-acp", "gemini", "opencode"]);
    let reg = Registry::builtin();
    assert_eq!(resolve(&reg, "codex", &path).unwrap().mode, Delegate::Acp);
    assert_eq!(resolve(&reg, "gemini", &path).unwrap().argv[1], "--acp");
    assert_eq!(
        resolve(&reg, "opencode", &path).unwrap().argv[1..],
        ["acp".to_owned()]
    );
    // Claude Code's ACP entry is an adapter (claude-agent-acp); without it, headless.
    let claude = resolve(&reg, "claude", &path).unwrap();
    assert_eq!(claude.mode, Delegate::Headless);
    assert_eq!(claude.argv[0], format!("{path}/claude"));
    assert_eq!(claude.outcome, Outcome::ClaudeJson);
}
