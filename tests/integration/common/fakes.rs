//! The scripted agents the tests drive (`fake-acp-agent`, `fake-headless-agent`), built on
//! demand from their own workspace member, `crates/test-fakes`.
//!
//! Owns finding them. They are not binaries of the shipped package (so `cargo install --path .`
//! never installs them, PLAN.md §14), so Cargo gives the tests no `CARGO_BIN_EXE_…` for them:
//! the first test that asks runs `cargo build -p agent-hub-test-fakes` into a
//! target dir of their own beside this binary's (`<target>/test-fakes`; the build Cargo is
//! running holds the lock of its own target dir). Up to date, that is a check of a fraction of
//! a second; a failed build fails the test that asked, with Cargo's output.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The folder the fakes are built into, or why they could not be built.
fn built() -> &'static Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT.get_or_init(build)
}

fn build() -> Result<PathBuf, String> {
    // This test binary is <target>/<profile>/deps/<name>-<hash>.
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this test binary: {e}"))?;
    let target = exe
        .ancestors()
        .nth(3)
        .ok_or_else(|| format!("{} is not inside a Cargo target dir", exe.display()))?;
    let dir = target.join("test-fakes");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/test-fakes/Cargo.toml");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(&cargo)
        .args(["build", "--quiet", "--offline", "--bins", "--manifest-path"])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&dir)
        .output()
        .map_err(|e| format!("cannot run {cargo:?} to build the test fakes: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "building the test fakes ({}) failed: {}",
            manifest.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(dir.join("debug"))
}

/// The path of one of the fakes (`fake-acp-agent`, `fake-headless-agent`), built if needed.
pub fn path(name: &str) -> String {
    match built() {
        Ok(dir) => {
            let p = dir.join(name);
            assert!(p.is_file(), "{} was not built", p.display());
            p.to_string_lossy().into_owned()
        }
        Err(e) => panic!("{e}"),
    }
}

/// `fake-acp-agent`.
pub fn acp_agent() -> String {
    path("fake-acp-agent")
}

/// `fake-headless-agent`.
pub fn headless_agent() -> String {
    path("fake-headless-agent")
}
