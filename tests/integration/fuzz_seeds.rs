//! Runs every fuzz target's body (`fuzz/bodies.rs`, `fuzz/drivers/`) over its committed seed
//! corpus, `fuzz/seeds/<target>/`, so the targets compile and hold on stable in every
//! `cargo test`, and a crash input kept there as a regression case fails the suite until it is
//! fixed (docs/fuzzing.md). Also checks that `fuzz/Cargo.toml` builds exactly these targets.
//!
//! `cargo test --release --test integration -- --ignored fuzz_seeds::write_seeds` rewrites the generated
//! seeds (from `protocol/`, `config.example.toml` and the docs) after a change to an input
//! language or to those files; files it does not generate (regression cases) are kept.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

#[path = "../../fuzz/bodies.rs"]
pub(crate) mod bodies;
#[path = "../../fuzz/drivers/mod.rs"]
mod drivers;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every target: the two relay decoders, then the drivers.
fn targets() -> Vec<(&'static str, drivers::Body)> {
    let mut t: Vec<(&'static str, drivers::Body)> = vec![
        ("frame_decoder", bodies::frame_decoder),
        ("relay_line", bodies::relay_line),
    ];
    t.extend(drivers::TARGETS);
    t
}

/// The generated seeds of each target.
fn generated() -> Vec<(&'static str, drivers::Seeds)> {
    vec![
        ("frame_decoder", relay_fixture_seeds(true)),
        ("relay_line", relay_fixture_seeds(false)),
        ("relay_session", drivers::relay_session::seeds(root())),
        ("hub_session", drivers::hub_session::seeds(root())),
        ("config_parse", drivers::config_parse::seeds(root())),
        ("roster_parse", drivers::roster_parse::seeds(root())),
        ("mcp_session", drivers::mcp_session::seeds(root())),
        ("hook_input", drivers::hook_input::seeds(root())),
        ("client_line", drivers::client_line::seeds(root())),
        ("stored_text", drivers::stored_text::seeds()),
    ]
}

/// Each relay fixture case's line, or its frame (protocol/relay/, format in its README).
fn relay_fixture_seeds(frames: bool) -> drivers::Seeds {
    let dir = root().join("protocol/relay");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("protocol/relay exists")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    let mut out = Vec::new();
    for p in paths {
        let f: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p).expect("readable")).expect("JSON");
        let stem = p
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or("x")
            .to_owned();
        for case in f["cases"].as_array().into_iter().flatten() {
            let name = format!("{stem}-{}", case["name"].as_str().unwrap_or("case"));
            let bytes = if frames {
                let hex = case["frame_hex"].as_str().unwrap_or("");
                (0..hex.len() / 2)
                    .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("hex"))
                    .collect()
            } else {
                case["line"].as_str().unwrap_or("").as_bytes().to_vec()
            };
            out.push((name, bytes));
        }
    }
    out
}

fn seed_dir(target: &str) -> PathBuf {
    root().join("fuzz/seeds").join(target)
}

#[test]
fn every_target_holds_over_its_seed_corpus() {
    for (target, body) in targets() {
        let dir = seed_dir(target);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e} (run the ignored write_seeds)", dir.display()))
            .map(|e| e.expect("a directory entry").path())
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{target}: no seeds in {}", dir.display());
        for f in files {
            let data = std::fs::read(&f).expect("readable");
            let run = std::panic::catch_unwind(|| body(&data));
            assert!(run.is_ok(), "{target}: {} fails", f.display());
        }
    }
}

#[test]
fn the_generated_seeds_are_committed() {
    for (target, seeds) in generated() {
        assert!(!seeds.is_empty(), "{target} generates no seeds");
        for (name, bytes) in seeds {
            let path = seed_dir(target).join(&name);
            let on_disk = std::fs::read(&path).unwrap_or_default();
            assert!(
                on_disk == bytes,
                "{}: missing or stale (run `cargo test --release --test integration -- --ignored fuzz_seeds::write_seeds`)",
                path.display()
            );
        }
    }
}

/// `fuzz/Cargo.toml` has one `[[bin]]` per target here, each with its `fuzz_targets/` file,
/// so a target cannot be added on one side only.
#[test]
fn cargo_fuzz_builds_exactly_these_targets() {
    let manifest = std::fs::read_to_string(root().join("fuzz/Cargo.toml")).expect("readable");
    let doc: toml::Table = manifest.parse().expect("fuzz/Cargo.toml is TOML");
    let bins: BTreeSet<String> = doc["bin"]
        .as_array()
        .expect("[[bin]] tables")
        .iter()
        .map(|b| {
            let name = b["name"].as_str().expect("a name").to_owned();
            let path = b["path"].as_str().expect("a path");
            assert_eq!(path, format!("fuzz_targets/{name}.rs"));
            assert!(
                root().join("fuzz").join(path).is_file(),
                "{path} is missing"
            );
            name
        })
        .collect();
    let ours: BTreeSet<String> = targets().iter().map(|(n, _)| (*n).to_owned()).collect();
    assert_eq!(bins, ours);
    let script = std::fs::read_to_string(root().join("scripts/fuzz.sh")).expect("scripts/fuzz.sh");
    for t in &ours {
        assert!(
            script.contains(t.as_str()),
            "scripts/fuzz.sh does not run {t}"
        );
    }
}

/// Writes the generated seeds (see the file's doc).
#[test]
#[ignore]
fn write_seeds() {
    for (target, seeds) in generated() {
        let dir = seed_dir(target);
        std::fs::create_dir_all(&dir).expect("can create the seed directory");
        for (name, bytes) in seeds {
            assert!(
                !name.contains('/') && !name.starts_with('.'),
                "seed name {name:?}"
            );
            std::fs::write(dir.join(name), bytes).expect("can write a seed");
        }
    }
}
