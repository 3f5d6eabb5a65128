//! The audit log's hash chain end to end (docs/operations.md, "Verifying the audit log"): the
//! real hub writes it across restarts and rotations, and `agent-hub-server audit verify`
//! names the first record where an edited, shortened or shuffled copy breaks.

use crate::harness::*;
use std::path::{Path, PathBuf};
use std::process::Command;

fn verify(paths: &[&Path], anchors: &[&str]) -> Output {
    let mut cmd = Command::new(SERVER);
    cmd.args(["audit", "verify"]).args(paths);
    for a in anchors {
        cmd.args(["--anchor", a]);
    }
    run(cmd, None)
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Writes `lines` as a copy of the log at `name` in the test's dir, with a copy of the hub's
/// `.head` beside it when `with_head`.
fn copy_as(hub: &Hub, name: &str, lines: &[String], with_head: bool) -> PathBuf {
    let path = hub.setup.path(name);
    let mut text = lines.join("\n");
    text.push('\n');
    write_file(&path, &text, 0o600);
    if with_head {
        let head = std::fs::read_to_string(hub.setup.path("audit.jsonl.head")).unwrap();
        write_file(&hub.setup.path(&format!("{name}.head")), &head, 0o600);
    }
    path
}

/// A log written by two runs of the hub: a send, a restart, a send.
fn two_runs() -> Hub {
    let mut hub = Setup::new().with_sqlite_store(64 * 1024 * 1024).start();
    hub.send("alpha", "beta", "task", None, "{\"n\":1}");
    hub.send("alpha", "beta", "task", None, "{\"n\":2}");
    hub.terminate();
    hub.restart();
    hub.send("beta", "alpha", "task", None, "{\"n\":3}");
    assert_eq!(hub.drain("beta").len(), 2);
    hub.terminate();
    hub
}

#[test]
fn the_chain_survives_a_restart_and_verifies_with_its_count_and_head() {
    let hub = two_runs();
    let audit = hub.audit_path();
    let n = lines(&audit).len();
    let out = verify(&[&audit], &[]);
    out.assert_code(0);
    assert!(
        out.stdout.starts_with(&format!(
            "OK: {n} records in 1 file ({n} chained, 0 from before audit format 3)\n"
        )),
        "{}",
        out.stdout
    );
    // One chain_start (the new log); the restart continued the chain without one.
    let records = hub.audit();
    assert_eq!(records[0]["event"], "chain_start");
    assert!(records[0]["prev"].is_null());
    assert_eq!(
        records
            .iter()
            .filter(|r| r["event"] == "chain_start")
            .count(),
        1
    );
    assert!(records.iter().skip(1).all(|r| r["prev"].is_string()));
    // The head printed is the one the hub logged at its last stop and keeps in .head.
    let head = out
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix("head sha256 "))
        .unwrap()
        .to_owned();
    let log = hub.service_log();
    let logged = log
        .lines()
        .filter_map(|l| l.split("audit chain head at stop: sha256 ").nth(1))
        .next_back()
        .unwrap();
    assert_eq!(logged, head);
    let kept = std::fs::read_to_string(hub.setup.path("audit.jsonl.head")).unwrap();
    assert_eq!(kept.trim(), head);
    assert_eq!(mode_of(&hub.setup.path("audit.jsonl.head")), 0o600);
    // The first run's head, taken from the service log, anchors the first part of the log.
    let first = log
        .lines()
        .filter_map(|l| l.split("audit chain head at stop: sha256 ").nth(1))
        .next()
        .unwrap();
    verify(&[&audit], &[first]).assert_code(0);
    let out = verify(&[&audit], &[&"0".repeat(64)]);
    out.assert_code(1);
    assert!(out.stdout.contains("--anchor"), "{}", out.stdout);
}

#[test]
fn an_edited_removed_reordered_or_cut_record_is_named() {
    let hub = two_runs();
    let original = lines(&hub.audit_path());
    let n = original.len();
    assert!(n >= 10, "{n} records");
    let k = n / 2; // a record in the middle (0-based), line k + 1

    let check = |name: &str, lines: &[String], with_head: bool, line: usize, why: &str| {
        let path = copy_as(&hub, name, lines, with_head);
        let out = verify(&[&path], &[]);
        out.assert_code(1);
        let want = format!("BROKEN at {} line {line}: ", path.display());
        assert!(
            out.stdout.starts_with(&want) && out.stdout.contains(why),
            "{name}: want {want:?}…{why:?}, got {}",
            out.stdout
        );
    };

    // One byte of record k + 1 changed, the line still valid JSON: the next record breaks.
    let mut edited = original.clone();
    let at = edited[k].find("\"ts\":\"").unwrap() + 7;
    let mut bytes = edited[k].clone().into_bytes();
    bytes[at] = if bytes[at] == b'1' { b'2' } else { b'1' };
    edited[k] = String::from_utf8(bytes).unwrap();
    check("edited.jsonl", &edited, false, k + 2, "does not match line");

    let mut deleted = original.clone();
    deleted.remove(k);
    check(
        "deleted.jsonl",
        &deleted,
        false,
        k + 1,
        "does not match line",
    );

    let mut swapped = original.clone();
    swapped.swap(k, k + 1);
    check(
        "swapped.jsonl",
        &swapped,
        false,
        k + 1,
        "does not match line",
    );

    // The last two records cut off: only the head kept beside the log can tell.
    let cut = &original[..n - 2];
    let alone = copy_as(&hub, "cut-alone.jsonl", cut, false);
    verify(&[&alone], &[]).assert_code(0);
    check(
        "cut.jsonl",
        cut,
        true,
        n - 1,
        "records were cut from the end",
    );

    // Cut in the middle of a line.
    let path = hub.setup.path("torn.jsonl");
    let text = original.join("\n");
    write_file(&path, &text[..text.len() - 5], 0o600);
    let out = verify(&[&path], &[]);
    out.assert_code(1);
    assert!(
        out.stdout
            .contains(&format!("line {n}: the line is incomplete")),
        "{}",
        out.stdout
    );
}

#[test]
fn a_rotated_log_continues_its_chain_in_the_next_file() {
    let mut hub = Setup::new().start();
    hub.send("alpha", "beta", "task", None, "{}");
    hub.terminate();
    let old = hub.setup.path("audit.jsonl.1");
    std::fs::rename(hub.audit_path(), &old).unwrap();
    hub.restart();
    hub.send("alpha", "beta", "task", None, "{}");
    hub.terminate();
    let new = hub.audit_path();
    let first = hub.audit();
    assert_eq!(first[0]["event"], "chain_start");
    assert!(
        first[0]["reason"]
            .as_str()
            .unwrap()
            .contains("the chain continues from the last record of the file before it"),
        "{}",
        first[0]
    );
    let out = verify(&[&old, &new], &[]);
    out.assert_code(0);
    let total = lines(&old).len() + lines(&new).len();
    assert!(
        out.stdout
            .starts_with(&format!("OK: {total} records in 2 files")),
        "{}",
        out.stdout
    );
    // The new file alone verifies, saying its chain comes from a record not given.
    let out = verify(&[&new], &[]);
    out.assert_code(0);
    assert!(
        out.stdout
            .contains("continues a chain from a record not given"),
        "{}",
        out.stdout
    );
    // In the wrong order nothing links the old file to the new one, and verify says so.
    let out = verify(&[&new, &old], &[]);
    out.assert_code(0);
    assert!(
        out.stdout.contains(&format!(
            "note: {}:1: a new chain starts (new audit log); its link to {} is not proven",
            old.display(),
            new.display()
        )),
        "{}",
        out.stdout
    );
}

/// logrotate's `copytruncate`: the file is copied and emptied under the running hub, whose
/// next record links to the last one, now in the copy.
#[test]
fn a_log_copied_and_truncated_under_the_running_hub_keeps_its_chain() {
    let mut hub = Setup::new().start();
    hub.send("alpha", "beta", "task", None, "{}");
    let copy = hub.setup.path("audit.jsonl.1");
    std::fs::copy(hub.audit_path(), &copy).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(hub.audit_path())
        .unwrap()
        .set_len(0)
        .unwrap();
    hub.send("alpha", "beta", "task", None, "{}");
    hub.terminate();
    let out = verify(&[&copy, &hub.audit_path()], &[]);
    out.assert_code(0);
    assert!(out.stdout.contains(" records in 2 files"), "{}", out.stdout);
}

#[test]
fn verify_usage_errors_exit_2() {
    let dir = TempDir::new();
    let missing = dir.path.join("nope.jsonl");
    let out = verify(&[&missing], &[]);
    out.assert_code(2);
    assert!(out.stderr.contains("cannot read"), "{}", out.stderr);
    let out = run(
        {
            let mut c = Command::new(SERVER);
            c.args(["audit", "verify"]);
            c
        },
        None,
    );
    out.assert_code(2);
    let empty = dir.path.join("empty.jsonl");
    write_file(&empty, "", 0o600);
    let out = verify(&[&empty], &["xyz"]);
    out.assert_code(2);
    assert!(out.stderr.contains("not a SHA-256"), "{}", out.stderr);
    let out = verify(&[&empty], &[]);
    out.assert_code(0);
    assert!(out.stdout.starts_with("OK: 0 records"), "{}", out.stdout);
}

/// The `.head` file is rewritten once per `limits.service_log_flush_ms`, so a SIGKILL leaves
/// it naming a record before the log's last (docs/operations.md, "The hash chain"). The next
/// start says so at INFO with the count, writes no `chain_start` and no WARN, and `audit
/// verify` finds the chain intact with the records after the head counted.
#[test]
fn a_sigkilled_hub_restarts_without_a_false_cut_and_verify_counts_the_unanchored_records() {
    // The longest interval the config takes: the head stays where the first run's stop left
    // it for the whole second run, which is one send long.
    let mut hub = Setup::new()
        .with_limits(|l| l.service_log_flush_ms = 10_000)
        .start();
    hub.send("alpha", "beta", "task", None, "{}");
    hub.terminate();
    let head_path = hub.setup.path("audit.jsonl.head");
    let at_stop = std::fs::read_to_string(&head_path).unwrap();
    hub.restart();
    hub.send("alpha", "beta", "task", None, "{}");
    hub.kill();
    let kept = std::fs::read_to_string(&head_path).unwrap();
    assert_eq!(
        kept, at_stop,
        "within the interval the head was not rewritten"
    );
    let log = lines(&hub.audit_path());
    let head_line = log
        .iter()
        .position(|l| {
            agent_hub_server::event_loop::audit_chain::hex(
                &agent_hub_server::event_loop::audit_chain::line_hash(l.as_bytes()),
            ) == kept.trim()
        })
        .expect("the head names a record of the log");
    let after = log.len() - 1 - head_line;
    assert!(
        after >= 2,
        "the second run's records follow the head: {after}"
    );
    let out = verify(&[&hub.audit_path()], &[]);
    out.assert_code(0);
    assert!(
        out.stdout.contains(&format!(
            ":{}; the {after} records after it are not anchored",
            head_line + 1
        )),
        "{}",
        out.stdout
    );
    hub.restart();
    let text = hub.wait_service_log("the chain's startup lines", |s| {
        s.contains("hub ready") && s.matches("audit chain continues").count() == 2
    });
    assert!(
        text.contains(&format!("followed by the log's last {after} records")),
        "{text}"
    );
    assert!(!text.contains(" WARN "), "{text}");
    hub.send("alpha", "beta", "task", None, "{}");
    hub.terminate();
    let records = hub.audit();
    assert_eq!(
        records
            .iter()
            .filter(|r| r["event"] == "chain_start")
            .count(),
        1,
        "no chain_start claims records were cut"
    );
    verify(&[&hub.audit_path()], &[]).assert_code(0);
}
