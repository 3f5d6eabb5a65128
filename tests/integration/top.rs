//! `agent-hub top` against a real hub (docs/operations.md "Watching a hub"): the plain
//! snapshot of `--once`, and the live view driven in tmux (send-keys, capture-pane): it shows
//! a queued envelope's recipient and a parked await, sorts on `s`, quits on `q` and on
//! Ctrl-C, and leaves the terminal as it found it.
//!
//! The tmux test needs tmux. Without it the test says so loudly and passes, unless
//! `AGENT_HUB_REQUIRE_TMUX=1` (set by `.ci/run`, which installs tmux), where it fails.

use crate::harness::*;
use std::process::Command;

/// A queued envelope alpha → beta (nobody reads beta: stuck), and gamma parked on a filtered
/// await. Returns the parked connection (dropping it unparks gamma) and the envelope id.
fn scene(hub: &Hub) -> (Raw, String) {
    let id = hub.send(
        "alpha",
        "beta",
        "task",
        Some("corr-top-secret"),
        r#"{"secret":"body-top-secret"}"#,
    );
    let parked = hub.park("gamma", r#"{"await":{"kind":"result"}}"#);
    (parked, id)
}

/// A hub whose config names `delta`, the view's identity here, an operator: only the
/// operator's view shows other agents' filters and envelopes (SPEC §14 "Visibility").
fn operator_hub() -> Hub {
    let mut setup = Setup::new();
    setup.config_text = Some(format!(
        "operators = [\"delta\"]\n{}",
        setup.generated_config()
    ));
    setup.start()
}

fn row<'a>(text: &'a str, start: &str) -> &'a str {
    text.lines()
        .find(|l| l.starts_with(start))
        .unwrap_or_else(|| panic!("no line starting {start:?} in:\n{text}"))
}

#[test]
fn top_once_prints_the_queued_recipient_the_parked_await_and_the_envelope_without_its_body() {
    let hub = operator_hub();
    let (_parked, id) = scene(&hub);
    let out = hub.cli("top", "delta", &["--once"]);
    out.assert_code(0);
    let text = &out.stdout;
    assert!(!text.contains('\x1b'), "plain lines, no escapes:\n{text}");
    assert!(text.starts_with("agent-hub top — 127.0.0.1:"), "{text}");
    let beta = row(text, "beta ");
    assert!(
        beta.contains(" 1 ") && beta.contains("STUCK: mail queued, no reader"),
        "{beta}"
    );
    let gamma = row(text, "gamma ");
    assert!(gamma.contains("kind=result"), "{gamma}");
    let short_id: String = id.chars().take(13).collect();
    let env = text
        .lines()
        .find(|l| l.contains(&short_id))
        .unwrap_or_else(|| panic!("no envelope row for {id}:\n{text}"));
    assert!(
        env.contains("alpha") && env.contains("beta") && env.contains("queued"),
        "{env}"
    );
    for secret in ["body-top-secret", "corr-top-secret", "SECRET"] {
        assert!(!text.contains(secret), "{secret} in the view:\n{text}");
    }
    // The alias, and a hub that cannot be reached: the snapshot says why, exit 1.
    hub.cli("watch", "delta", &["--once"]).assert_code(0);
    let dead = Command::new(CLIENT)
        .args([
            "top",
            "--once",
            "--as",
            "delta",
            "--port",
            "1",
            "--token-file",
        ])
        .arg(hub.token_file("delta"))
        .output()
        .unwrap();
    assert_eq!(dead.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&dead.stdout).contains("hub: cannot connect"));
    // A bad interval is a usage error.
    let bad = hub.cli("top", "delta", &["--once", "--interval", "0"]);
    bad.assert_code(1);
    assert!(bad.stderr.contains("--interval"), "{}", bad.stderr);
}

/// A tmux server of its own (`-L`), killed on drop.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> std::process::Output {
        Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .env("TERM", "xterm-256color")
            .output()
            .expect("run tmux")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.cmd(args);
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self, target: &str) -> String {
        self.ok(&["capture-pane", "-p", "-t", target])
    }

    /// Polls the pane until `pred` holds on its text.
    fn wait_screen(&self, target: &str, what: &str, pred: impl Fn(&str) -> bool) -> String {
        let mut last = String::new();
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            poll_until(what, || {
                last = self.screen(target);
                pred(&last).then(|| last.clone())
            })
        }));
        found.unwrap_or_else(|_| panic!("{what}; the pane shows:\n{last}"))
    }

    /// Polls until the pane's process has exited; returns "<exit status> <alternate_on>".
    /// The status is the one the view's shell wrote to `status_file` (`view; echo $? > FILE`):
    /// tmux 3.3 can mark a pane dead without ever filling in `pane_dead_status`, so its own
    /// field cannot be waited for.
    fn wait_dead(&self, target: &str, status_file: &std::path::Path) -> String {
        poll_until("the view to exit", || {
            let status = std::fs::read_to_string(status_file).ok()?;
            let status = status.trim().to_owned();
            if status.is_empty() {
                return None;
            }
            let s = self.ok(&[
                "display-message",
                "-p",
                "-t",
                target,
                "#{pane_dead} #{alternate_on}",
            ]);
            let fields: Vec<&str> = s.split_whitespace().collect();
            (fields.first() == Some(&"1"))
                .then(|| format!("{status} {}", fields.get(1).unwrap_or(&"?")))
        })
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.cmd(&["kill-server"]);
    }
}

fn tmux_available() -> bool {
    let found = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        assert!(
            std::env::var("AGENT_HUB_REQUIRE_TMUX").as_deref() != Ok("1"),
            "AGENT_HUB_REQUIRE_TMUX=1 but tmux is not installed: the live view cannot be checked"
        );
        eprintln!(
            "\n*** SKIPPED top::the_live_view_in_tmux…: tmux is not installed. Install it \
             (apt-get install tmux) to check the live view; .ci/run does. ***\n"
        );
    }
    found
}

#[test]
fn the_live_view_in_tmux_shows_the_queued_recipient_and_the_parked_await_and_quits_on_q_and_ctrl_c()
{
    if !tmux_available() {
        return;
    }
    let hub = operator_hub();
    let (_parked, _id) = scene(&hub);
    let tmux = Tmux {
        socket: format!("agent-hub-top-{}-{}", std::process::id(), hub.port),
    };
    let view = format!(
        "{CLIENT} top --as delta --token-file {} --port {} --interval 0.2",
        hub.token_file("delta").display(),
        hub.port
    );
    // Each run's shell records the view's exit status (see `Tmux::wait_dead`).
    let first_status = hub.setup.path("top-first.status");
    let again_status = hub.setup.path("top-again.status");
    let again = format!("{view}; echo $? > {}", again_status.display());
    let view = format!("{view}; echo $? > {}", first_status.display());
    tmux.ok(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "132",
        "-y",
        "40",
        &view,
    ]);
    // The view runs until it is told to quit, so there is time to keep its pane after exit.
    tmux.ok(&["set-option", "-t", "top", "remain-on-exit", "on"]);
    let screen = tmux.wait_screen("top", "the view to show beta stuck and gamma parked", |s| {
        s.contains("STUCK: mail queued, no reader") && s.contains("kind=result")
    });
    assert!(row(&screen, "beta ").contains("STUCK"), "{screen}");
    assert!(row(&screen, "gamma ").contains("kind=result"), "{screen}");
    assert!(
        screen.contains("keys: s sort, r reverse, q quit"),
        "{screen}"
    );
    assert!(!screen.contains("body-top-secret"), "{screen}");
    // The view refreshes: an envelope sent now appears without a key.
    hub.send("beta", "alpha", "late-kind", None, "{}");
    tmux.wait_screen("top", "the new envelope to appear", |s| {
        s.contains("late-kind")
    });
    // `s` cycles the sort column (state → last seen).
    tmux.ok(&["send-keys", "-t", "top", "s"]);
    tmux.wait_screen("top", "the sort to change", |s| {
        s.contains("sort: last seen")
    });
    tmux.ok(&["send-keys", "-t", "top", "q"]);
    let status = tmux.wait_dead("top", &first_status);
    assert_eq!(status, "0 0", "exited 0 and left the alternate screen");

    // Ctrl-C quits the same way (raw mode reads it as a key), restoring the terminal.
    tmux.ok(&["new-window", "-t", "top", "-n", "again", &again]);
    tmux.ok(&["set-option", "-t", "top:again", "remain-on-exit", "on"]);
    tmux.wait_screen("top:again", "the view to draw again", |s| {
        s.contains("STUCK: mail queued, no reader")
    });
    tmux.ok(&["send-keys", "-t", "top:again", "C-c"]);
    assert_eq!(tmux.wait_dead("top:again", &again_status), "0 0");
}
