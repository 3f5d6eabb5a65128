//! Fuzz target `roster_parse`: the token roster (SPEC §6, `roster::Roster::parse`) from any
//! text. A roster that parses authenticates exactly its entries; a refusal's text and the
//! roster's `Debug` never carry a token.

use agent_hub_proto::kernel::names::HUB_NAME;
use agent_hub_proto::roster::Roster;
use std::path::Path;

pub fn run(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = Roster::parse(text);
    // The entries as TOML reads them, to check the roster against (None: not even TOML), and
    // every key a refusal may quote (top-level keys and agent names).
    let doc = text.parse::<toml::Table>().ok();
    let entries: Option<Vec<(String, String)>> = doc.as_ref().map(|t| {
        t.get("agents")
            .and_then(toml::Value::as_table)
            .map(|a| {
                a.iter()
                    .filter_map(|(n, v)| v.as_str().map(|s| (n.clone(), s.to_owned())))
                    .collect()
            })
            .unwrap_or_default()
    });
    let keys: Vec<&str> = doc
        .iter()
        .flat_map(|t| {
            let agents = t.get("agents").and_then(toml::Value::as_table);
            t.keys().chain(agents.into_iter().flat_map(|a| a.keys()))
        })
        .map(String::as_str)
        .collect();
    // A token no key spells, raw or as a refusal quotes it (`{:?}`, so a tab in a name reads
    // `\t`): seeing it in a text can only be a leak. (Found by this target: a name with a tab
    // before `0ken-…` spells the token `t0ken-…` once quoted.)
    let quoted: Vec<String> = keys.iter().map(|k| format!("{k:?}")).collect();
    let secret = |token: &str| {
        token.len() >= 8
            && keys.iter().all(|k| !k.contains(token))
            && quoted.iter().all(|k| !k.contains(token))
    };
    match parsed {
        Err(e) => {
            let msg = e.to_string();
            for (_, token) in entries.iter().flatten() {
                if secret(token) {
                    assert!(
                        !msg.contains(token.as_str()),
                        "a refusal quotes a token: {msg}"
                    );
                }
            }
        }
        Ok(roster) => {
            let entries = entries.expect("a roster that parses is TOML");
            let names = roster.names();
            assert!(!names.is_empty(), "a roster with no agents parsed");
            assert_eq!(names.len(), entries.len(), "every entry is an agent");
            let debug = format!("{roster:?}");
            for (name, token) in &entries {
                assert!(!name.trim().is_empty());
                assert!(
                    !name.eq_ignore_ascii_case(HUB_NAME),
                    "the hub's name is reserved"
                );
                assert!(roster.contains(name));
                assert!(
                    roster.verify(name, token),
                    "{name:?}: its own token is refused"
                );
                let mut longer = token.clone();
                longer.push('x');
                assert!(
                    !roster.verify(name, &longer),
                    "{name:?}: a longer token passes"
                );
                assert!(!roster.verify(name, ""), "{name:?}: an empty token passes");
                if token.len() > 1 {
                    let shorter = &token[..token.char_indices().last().map_or(0, |(i, _)| i)];
                    assert!(!roster.verify(name, shorter), "{name:?}: a prefix passes");
                }
                for (other, _) in &entries {
                    if other != name {
                        assert!(
                            !roster.verify(other, token),
                            "{name:?}'s token opens {other:?}"
                        );
                    }
                }
            }
            assert!(!roster.verify(HUB_NAME, ""));
            // `Debug` depends on the names only: the same names with other tokens print the
            // same. (A substring test is not enough: a token may spell a piece of the Debug
            // text itself, `Roster { names: [...`, found by this target.)
            let mut agents = toml::Table::new();
            for (i, (name, _)) in entries.iter().enumerate() {
                agents.insert(
                    name.clone(),
                    toml::Value::String(format!("replacement-token-{i:06}-for-debug")),
                );
            }
            let mut doc = toml::Table::new();
            doc.insert("agents".to_owned(), toml::Value::Table(agents));
            let other = toml::to_string(&doc).expect("a table of strings serialises");
            let other = Roster::parse(&other).expect("the same names with plain tokens parse");
            assert_eq!(debug, format!("{other:?}"), "Debug shows a token");
        }
    }
}

/// The rosters the tests and docs use, and the refusals' shapes.
pub fn seeds(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = vec![
        (
            "transcripts-roster".to_owned(),
            b"[agents]\nmneme = \"tok-mneme-7c1d3f9a\"\ndatastore = \"tok-datastore-2b8e6a40\"\nscribe = \"tok-scribe-91f0c5d7\"\n".to_vec(),
        ),
        (
            "quoted-names".to_owned(),
            "[agents]\n\"agent one\" = \"t0ken-one-aaaa\"\n\"ünï\" = 'literal-token-b'\n".into(),
        ),
        ("shared-token".to_owned(), b"[agents]\na = \"same-token-x\"\nb = \"same-token-x\"\n".to_vec()),
        (
            "shared-token-escaped-name".to_owned(),
            b"[agents]\n\"stok\\t0ken-on-e\" = \"t0ken-on-e\"\nb = \"t0ken-on-e\"\n".to_vec(),
        ),
        ("reserved".to_owned(), b"[agents]\nHub = \"hub-token-zz\"\n".to_vec()),
        ("outside".to_owned(), b"x = 1\n[agents]\na = \"t\"\n".to_vec()),
        ("nested".to_owned(), b"[agents]\na = { token = \"t\" }\n[agents.b]\nc = 1\n".to_vec()),
        ("blank".to_owned(), b"[agents]\n\" \" = \"t\"\nz = \"  \"\n".to_vec()),
        ("empty".to_owned(), b"[agents]\n".to_vec()),
    ];
    for doc in ["README.md", "docs/operations.md"] {
        // The roster examples in the docs: every ```toml block that has an [agents] table.
        let Ok(text) = std::fs::read_to_string(root.join(doc)) else {
            continue;
        };
        for (i, block) in text.split("```toml").skip(1).enumerate() {
            let block = block.split("```").next().unwrap_or("");
            if block.contains("[agents]") {
                let name = format!("{}-{i}", doc.replace(['/', '.'], "-"));
                out.push((name, block.as_bytes().to_vec()));
            }
        }
    }
    out
}
