//! Tests of install and uninstall planning and applying, on a fake home.

use super::*;
use crate::agents::jsonedit;
use crate::agents::manifest::{builtins, McpConfig};
use std::cell::RefCell;
use std::collections::HashMap;

fn id() -> HubIdentity {
    HubIdentity {
        command: "/usr/local/bin/agent-hub".into(),
        name: "worker".into(),
        token_file: "/home/u/.agent-hub/worker.token".into(),
        port: 46110,
    }
}

fn manifest(name: &str) -> Manifest {
    builtins().0.into_iter().find(|m| m.name == name).unwrap()
}

/// Runs install then uninstall against an in-memory HOME and returns the three states.
fn round_trip(name: &str, files: &[(&str, &str)]) -> [HashMap<PathBuf, String>; 3] {
    round_trip_manifest(&manifest(name), files)
}

fn round_trip_manifest(m: &Manifest, files: &[(&str, &str)]) -> [HashMap<PathBuf, String>; 3] {
    let home = PathBuf::from("/h");
    let fs: RefCell<HashMap<PathBuf, String>> = RefCell::new(
        files
            .iter()
            .map(|(p, t)| (home.join(p), t.to_string()))
            .collect(),
    );
    let before = fs.borrow().clone();
    let install = Action::Install {
        id: id(),
        plugin_source: Some("// plugin for @AGENT_HUB_AS@\n".into()),
        skills: true,
    };
    let mut states = Vec::new();
    for action in [&install, &install, &Action::Uninstall] {
        let read = |p: &Path| Ok(fs.borrow().get(p).cloned());
        let plan = plan(m, action, &home, &read);
        assert_eq!(plan.error.as_ref().map(ToString::to_string), None);
        for c in &plan.changes {
            match &c.after {
                Some(t) => fs.borrow_mut().insert(c.path.clone(), t.clone()),
                None => fs.borrow_mut().remove(&c.path),
            };
        }
        states.push(fs.borrow().clone());
    }
    assert_eq!(states[0], states[1], "a second install changes nothing");
    [before, states.remove(0), states.remove(1)]
}

#[test]
fn every_builtin_round_trips_from_nothing() {
    for name in ["claude", "codex", "gemini", "opencode", "droid"] {
        let [before, installed, after] = round_trip(name, &[]);
        assert!(!installed.is_empty(), "{name}");
        assert_eq!(after, before, "{name}");
    }
}

#[test]
fn claude_keeps_other_servers_and_hooks() {
    let claude_json = "{\n  \"numStartups\": 3,\n  \"mcpServers\": {\n    \"github\": {\n      \"command\": \"gh-mcp\"\n    }\n  }\n}\n";
    let settings = "{\n  \"hooks\": {\n    \"Stop\": [\n      {\n        \"hooks\": [\n          {\n            \"type\": \"command\",\n            \"command\": \"say done\"\n          }\n        ]\n      }\n    ]\n  }\n}\n";
    let [before, installed, after] = round_trip(
        "claude",
        &[
            (".claude.json", claude_json),
            (".claude/settings.json", settings),
        ],
    );
    assert_eq!(after, before);
    let s = &installed[&PathBuf::from("/h/.claude/settings.json")];
    let v = jsonedit::value(s).unwrap();
    assert_eq!(v["hooks"]["Stop"].as_array().unwrap().len(), 2);
    assert_eq!(
        v["hooks"]["Stop"][1]["hooks"][0]["command"],
        "/usr/local/bin/agent-hub hook stop --as worker --token-file /home/u/.agent-hub/worker.token --port 46110"
    );
    let c = jsonedit::value(&installed[&PathBuf::from("/h/.claude.json")]).unwrap();
    assert_eq!(c["mcpServers"]["github"]["command"], "gh-mcp");
    assert_eq!(c["mcpServers"]["agent-hub"]["args"][2], "worker");
}

#[test]
fn a_changed_identity_replaces_our_entries_only() {
    let home = PathBuf::from("/h");
    let m = manifest("claude");
    let fs: RefCell<HashMap<PathBuf, String>> = RefCell::new(HashMap::new());
    for (name, port) in [("one", 1), ("two", 2)] {
        let action = Action::Install {
            id: HubIdentity {
                name: name.into(),
                port,
                ..id()
            },
            plugin_source: None,
            skills: true,
        };
        let read = |p: &Path| Ok(fs.borrow().get(p).cloned());
        let plan = plan(&m, &action, &home, &read);
        for c in plan.changes {
            fs.borrow_mut().insert(c.path, c.after.unwrap());
        }
    }
    let s = jsonedit::value(&fs.borrow()[&home.join(".claude/settings.json")]).unwrap();
    let stop = s["hooks"]["Stop"].as_array().unwrap();
    assert_eq!(stop.len(), 1);
    assert!(stop[0]["hooks"][0]["command"]
        .as_str()
        .unwrap()
        .contains("--as two --token-file"));
}

#[test]
fn an_unparseable_file_stops_that_agent_only() {
    let home = PathBuf::from("/h");
    let read = |p: &Path| Ok((p == home.join(".claude.json")).then(|| "{ not json".to_owned()));
    let action = Action::Install {
        id: id(),
        plugin_source: None,
        skills: true,
    };
    let p = plan(&manifest("claude"), &action, &home, &read);
    assert!(p.changes.is_empty());
    assert!(
        p.error
            .as_ref()
            .unwrap()
            .to_string()
            .starts_with("~/.claude.json: not valid JSON at line 1"),
        "{p:?}"
    );
    let p = plan(&manifest("codex"), &action, &home, &read);
    assert_eq!(p.error.as_ref().map(ToString::to_string), None);
}

#[test]
fn our_hook_commands_are_recognised() {
    assert!(is_our_hook_command(&id().hook_command()));
    assert!(is_our_hook_command(
        "'/Users/J Doe/bin/agent-hub' hook stop --as x"
    ));
    assert!(is_our_hook_command("agent-hub hook stop"));
    assert!(!is_our_hook_command("agent-hub hook drain"));
    assert!(!is_our_hook_command("/bin/other hook stop"));
    assert!(!is_our_hook_command("say done"));
    assert!(!is_our_hook_command(""));
}

#[test]
fn identities_are_checked() {
    assert_eq!(id().validate(), Ok(()));
    assert!(HubIdentity {
        name: "a b".into(),
        ..id()
    }
    .validate()
    .is_err());
    assert!(HubIdentity {
        name: "HUB".into(),
        ..id()
    }
    .validate()
    .is_err());
    assert!(HubIdentity {
        name: "-x".into(),
        ..id()
    }
    .validate()
    .is_err());
    assert!(HubIdentity {
        command: "agent-hub".into(),
        ..id()
    }
    .validate()
    .is_err());
    assert!(HubIdentity {
        token_file: "t.token".into(),
        ..id()
    }
    .validate()
    .is_err());
    assert!(HubIdentity { port: 0, ..id() }.validate().is_err());
    let spaced = HubIdentity {
        command: "/opt/my hub/agent-hub".into(),
        ..id()
    };
    assert!(spaced
        .hook_command()
        .starts_with("'/opt/my hub/agent-hub' hook stop"));
}

#[test]
fn skills_render_the_identity_and_carry_a_stamp() {
    for skill in &SKILLS {
        assert_eq!(
            skill.source.matches(SKILL_IDENTITY_MARKER).count(),
            1,
            "{}",
            skill.name
        );
        assert!(skill
            .source
            .starts_with(&format!("---\nname: {}\n", skill.name)));
        let out = render_skill(skill.source, &id()).unwrap();
        assert!(!out.contains(SKILL_IDENTITY_MARKER));
        assert!(out.contains(
            "`$HUB` is `--as worker --token-file /home/u/.agent-hub/worker.token --port 46110`, and the client is `/usr/local/bin/agent-hub`"
        ), "{out}");
        assert!(out.starts_with(&format!("---\nname: {}\n", skill.name)));
        assert!(skill_is_pristine(&out));
        assert!(!skill_is_pristine(skill.source), "the source has no stamp");
        // Any edit, anywhere, breaks the stamp.
        assert!(!skill_is_pristine(&out.replacen("worker", "w0rker", 1)));
        assert!(!skill_is_pristine(&format!("{out}\n")));
        assert!(!skill_is_pristine(&out[..out.len() - 1]));
        let last = out.lines().last().unwrap();
        assert!(!skill_is_pristine(&format!("{last}\n")), "a stamp alone");
    }
    let spaced = HubIdentity {
        token_file: "/home/J Doe/w.token".into(),
        ..id()
    };
    assert!(render_skill(SKILLS[0].source, &spaced)
        .unwrap()
        .contains("--token-file '/home/J Doe/w.token' --port"));
    for bad in ["/a`b", "/a\nb"] {
        let bad = HubIdentity {
            token_file: bad.into(),
            ..id()
        };
        assert!(render_skill(SKILLS[0].source, &bad).is_err());
    }
}

#[test]
fn claude_places_the_skills_and_uninstall_takes_only_unedited_ones() {
    let [_, installed, after] = round_trip("claude", &[]);
    assert!(after.is_empty());
    for skill in &SKILLS {
        let p = PathBuf::from(format!("/h/.claude/skills/{}/SKILL.md", skill.name));
        assert_eq!(
            installed[&p],
            render_skill(skill.source, &id()).unwrap(),
            "{}",
            skill.name
        );
    }
    let home = PathBuf::from("/h");
    let edited_path = home.join(".claude/skills/agent-hub-resident/SKILL.md");
    let edited = "---\nname: agent-hub-resident\ndescription: mine\n---\n".to_owned();
    let older = stamp_skill("an older version of ours\n".to_owned());
    let older_path = home.join(".claude/skills/agent-hub-orchestrator/SKILL.md");
    let files: HashMap<PathBuf, String> = [
        (edited_path.clone(), edited.clone()),
        (older_path.clone(), older.clone()),
    ]
    .into();
    let read = |p: &Path| Ok(files.get(p).cloned());
    let m = manifest("claude");
    let install = |skills| Action::Install {
        id: id(),
        plugin_source: None,
        skills,
    };
    let p = plan(&m, &install(true), &home, &read);
    let skill_changes: Vec<&FileChange> = p
        .changes
        .iter()
        .filter(|c| c.path.ends_with(SKILL_FILE))
        .collect();
    assert_eq!(skill_changes.len(), 1, "{p:?}");
    assert_eq!(skill_changes[0].path, older_path);
    assert_eq!(skill_changes[0].before.as_deref(), Some(older.as_str()));
    assert!(p.notes.iter().any(|n| {
        n
        == "~/.claude/skills/agent-hub-orchestrator/SKILL.md: skill agent-hub-orchestrator updated"
    }));
    assert!(p.notes.iter().any(|n| n.starts_with(
        "~/.claude/skills/agent-hub-resident/SKILL.md: skill agent-hub-resident was edited after it was installed"
    )), "{:?}", p.notes);

    let p = plan(&m, &install(false), &home, &read);
    assert!(p.changes.iter().all(|c| !c.path.ends_with(SKILL_FILE)));
    assert!(p
        .notes
        .contains(&"~/.claude/skills: skills not placed (--no-skills)".to_owned()));

    let p = plan(&m, &Action::Uninstall, &home, &read);
    assert_eq!(
        p.changes,
        vec![FileChange {
            path: older_path,
            shown: "~/.claude/skills/agent-hub-orchestrator/SKILL.md".into(),
            before: Some(older),
            after: None,
            remove_empty_dir: true,
        }]
    );
    assert!(
        p.notes.iter().any(|n| n.ends_with("left as it is")),
        "{:?}",
        p.notes
    );
}

#[test]
fn plugin_placeholders() {
    let out = render_plugin(
        "const AS = \"@AGENT_HUB_AS@\"; const P = @AGENT_HUB_PORT@; \"@AGENT_HUB_TOKEN_FILE@\"",
        &HubIdentity {
            token_file: "/a\"b".into(),
            ..id()
        },
    );
    assert_eq!(out, "const AS = \"worker\"; const P = 46110; \"/a\\\"b\"");
}

/// The seed's §3 example, verbatim: no `mcp_format` (told by `opencode.json`), no hook.
fn seed() -> Manifest {
    let text = include_str!("../../../../../protocol/manifests/valid/opencode.toml");
    Manifest::parse("/m/opencode.toml", text).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_seed_manifest_installs_its_mcp_server_in_the_inferred_format_and_no_hook() {
    let [before, installed, after] = round_trip_manifest(&seed(), &[]);
    assert_eq!(after, before);
    let files: Vec<&PathBuf> = installed.keys().collect();
    let config = PathBuf::from("/h/.config/opencode/opencode.json");
    assert_eq!(
        files,
        [&config],
        "only the MCP config: no plugin, no skills"
    );
    let v = jsonedit::value(&installed[&config]).unwrap();
    assert_eq!(
        v["mcp"]["agent-hub"]["type"], "local",
        "opencode-json's shape"
    );
}

#[test]
fn an_unknown_mcp_format_is_asked_for_by_install_and_by_an_uninstall_with_a_file_to_edit() {
    let mut m = seed();
    m.source = "/m/x.toml".into();
    m.install.mcp = Some(McpConfig {
        path: "~/.x/config.json".into(),
        format: None,
    });
    let home = PathBuf::from("/h");
    let install = Action::Install {
        id: id(),
        plugin_source: None,
        skills: true,
    };
    let nothing = |_: &Path| Ok(None);
    let e = plan(&m, &install, &home, &nothing)
        .error
        .unwrap()
        .to_string();
    assert!(
        e.starts_with("/m/x.toml: install.mcp_format: is needed to edit ~/.x/config.json"),
        "{e}"
    );
    // Uninstall: no file, nothing to find, no question.
    let p = plan(&m, &Action::Uninstall, &home, &nothing);
    assert_eq!(p.error.as_ref().map(ToString::to_string), None);
    assert!(p.changes.is_empty());
    assert_eq!(
        p.notes,
        ["~/.x/config.json: MCP server \"agent-hub\" not present"]
    );
    // A file there may hold our entry, in a layout nobody named: asked, nothing changed.
    let some = |_: &Path| Ok(Some("{\"mcpServers\": {\"agent-hub\": {}}}".to_owned()));
    let p = plan(&m, &Action::Uninstall, &home, &some);
    assert!(p.error.unwrap().to_string().contains("install.mcp_format"));
    assert!(p.changes.is_empty());
}
