//! Fuzz target `hook_input`: the JSON a Stop / AfterAgent hook reads on stdin
//! (`deliver::hook_input`), and what the hook does with it before it talks to the hub: the
//! session key, the stop policy over the persisted state, and the state file's name and text
//! (`deliver::policy`, `deliver::state`). The same bytes are also read as a state file, which
//! is the hook's other input from disk.

use agent_hub_cli::deliver::hook_input::{parse_hook_input, HookEvent};
use agent_hub_cli::deliver::policy::{gate, session_key, StopState, MAX_SESSIONS};
use agent_hub_cli::deliver::state::state_file;
use std::path::Path;

pub fn run(data: &[u8]) {
    let parsed = parse_hook_input(data);
    // Whitespace around the object changes nothing (a hook run by hand adds a newline).
    let mut padded = b" \t".to_vec();
    padded.extend_from_slice(data);
    padded.extend_from_slice(b"\r\n");
    let again = parse_hook_input(&padded);
    assert_eq!(
        parsed.as_ref().ok(),
        again.as_ref().ok(),
        "surrounding whitespace changed the reading"
    );
    assert_eq!(parsed.is_err(), again.is_err());
    match parsed {
        Err(e) => {
            let _ = e.to_string();
        }
        Ok(h) => {
            if let Some(id) = &h.session_id {
                assert!(!id.is_empty(), "an empty session id must read as none");
            }
            let stop = matches!(
                h.event,
                HookEvent::Stop | HookEvent::AfterAgent | HookEvent::Missing
            );
            assert_eq!(h.is_stop(), stop);
            if let HookEvent::Other(name) = &h.event {
                assert!(
                    !name.eq_ignore_ascii_case("stop") && !name.eq_ignore_ascii_case("afteragent"),
                    "{name:?} is a stop event"
                );
            }
            assert!(!h.agent.as_str().is_empty());
            policy_over(h.session_id.as_deref(), h.stop_hook_active);
            if let Some(id) = &h.session_id {
                state_file_is_contained(id);
            }
        }
    }
    if let Ok(text) = std::str::from_utf8(data) {
        state_file_is_contained(text);
    }
    // The same bytes as a state file: a state that reads back writes and reads the same.
    if let Ok(state) = serde_json::from_slice::<StopState>(data) {
        let text = serde_json::to_string(&state).expect("a state serialises");
        let back: StopState = serde_json::from_str(&text).expect("a written state reads back");
        assert_eq!(back, state);
        let mut state = state;
        for (i, key) in ["s:a", "s:b", "none"].iter().enumerate() {
            let _ = gate(true, Some(&state), key, 3);
            state.record_stop(key, i % 2 == 0, true, i as u64);
        }
        assert!(state.sessions.len() <= MAX_SESSIONS.max(3));
    }
}

/// The hook's decisions for this input, over a fresh state and one that has blocked before.
fn policy_over(session_id: Option<&str>, active: bool) {
    let key = session_key(session_id);
    let mut state = StopState::default();
    for round in 0..4u64 {
        let _ = gate(active, Some(&state), &key, 2);
        state.record_stop(&key, active, true, round);
    }
    let _ = gate(active, None, &key, 2);
    let text = serde_json::to_string(&state).expect("a state serialises");
    let back: StopState = serde_json::from_str(&text).expect("a written state reads back");
    assert_eq!(back, state, "the state file does not round trip");
    assert!(back.sessions.contains_key(&key));
}

/// Whatever the name, the state file lies directly in `<dir>/deliver/`.
fn state_file_is_contained(name: &str) {
    let dir = Path::new("/state");
    let path = state_file(dir, name, 4100);
    assert_eq!(
        path.parent(),
        Some(dir.join("deliver").as_path()),
        "state file {path:?} escapes its directory"
    );
    let file = path
        .file_name()
        .and_then(|f| f.to_str())
        .expect("a file name");
    assert!(
        !file.starts_with('.') && !file.contains('/') && file.ends_with("@4100.json"),
        "state file name {file:?}"
    );
}

/// The recorded hook inputs (`protocol/hooks/`), and a few edge shapes.
pub fn seeds(root: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for agent in ["claude", "codex", "gemini"] {
        let path = root.join("protocol/hooks").join(format!("{agent}.json"));
        let text = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        out.push((format!("sample-{agent}"), text));
    }
    let shapes: [(&str, &str); 6] = [
        ("empty", ""),
        (
            "camel-case",
            r#"{"sessionId":"s1","hookEventName":"Stop","stopHookActive":true}"#,
        ),
        (
            "subagent-stop",
            r#"{"hook_event_name":"SubagentStop","session_id":"x"}"#,
        ),
        (
            "wrong-types",
            r#"{"session_id":42,"stop_hook_active":"1","turn_id":null}"#,
        ),
        (
            "state-file",
            r#"{"version":1,"delivered_ids":["e1"],"sessions":{"s:a":{"consecutive_blocks":2,"updated_at_secs":5}}}"#,
        ),
        (
            "odd-session-id",
            r#"{"session_id":"../../etc/passwd","hook_event_name":"stop"}"#,
        ),
    ];
    for (name, text) in shapes {
        out.push((name.to_owned(), text.as_bytes().to_vec()));
    }
    out
}
