//! What a claudectl peer's heartbeat says of its machine, and what ours says to it
//! (claudectl 0.90+; `shared/design/relay-compat-0.92.md` §4; docs/relay-protocol.md §5
//! "claudectl's heartbeat").
//!
//! claudectl's `relay serve` sends a full beat every interval: `sessions` (its Claude Code
//! sessions: `session_id`, `pid`, `project`, `status`, cost fields), `capabilities` (its
//! version, `os`, `arch` and the tools it probed), `listen_addrs` (`ip:port` it can be
//! reached at) and, on a link that agreed `headroom`, `headroom` (free memory, load per core,
//! free disk, running and max tasks, tags). This module reads those into a bounded
//! `PeerWorker` and the peer's directory (one entry per session, so `who` lists them as
//! `<session>@<peer>`), and writes this hub's `capabilities` (its installed agent manifests as
//! tools) and `headroom` for claudectl's placement.
//!
//! A peer chooses every byte here, so everything kept is capped: sessions by the relay's
//! `DirectoryCaps`, tools, addresses and tags by count, every string by length. A piece that
//! does not parse is left out, never an error (claudectl treats a malformed piece the same
//! way, as a peer that did not say). Refuses: IO (the server probes the machine and hands the
//! figures in) and timers.

use crate::relay::heartbeat::{Directory, DirectoryCaps};
use crate::relay::message::{AgentCard, AgentEntry, AgentState};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// Tags kept from a peer's `headroom` (claudectl keeps 32).
pub const MAX_TAGS: usize = 32;
/// A tag's most bytes (claudectl: `[A-Za-z0-9._-]{1,40}`).
pub const MAX_TAG_BYTES: usize = 40;
/// Tools kept from a peer's `capabilities` (claudectl probes 5; room for manifests).
pub const MAX_TOOLS: usize = 64;
/// Addresses kept from a peer's `listen_addrs`.
pub const MAX_LISTEN_ADDRS: usize = 16;
/// The most bytes of any other string kept (a version, a project, a status, a tool name).
pub const MAX_FIELD_BYTES: usize = 128;

/// A machine's room for another task, as claudectl's `headroom` carries it: `mem_free_mb`,
/// `load_per_core`, `disk_free_mb` (each absent when unknown), `running_tasks`, `max_tasks`
/// (absent: no ceiling), `tags` (absent when empty).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Headroom {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_free_mb: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_per_core: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_free_mb: Option<u64>,
    #[serde(default)]
    pub running_tasks: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tasks: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// Whether `t` is a tag claudectl keeps: 1–40 bytes of `[A-Za-z0-9._-]`.
pub fn valid_tag(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= MAX_TAG_BYTES
        && t.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl Headroom {
    /// The same figures within bounds: valid tags only, at most `MAX_TAGS`; a load that is
    /// not a finite non-negative number is unknown.
    pub fn bounded(mut self) -> Headroom {
        self.tags.retain(|t| valid_tag(t));
        self.tags.truncate(MAX_TAGS);
        if self
            .load_per_core
            .is_some_and(|l| !l.is_finite() || l < 0.0)
        {
            self.load_per_core = None;
        }
        self
    }
}

/// One tool in claudectl's `capabilities.tools`: `{"state":"present", version?, credential?}`
/// or `{"state":"missing"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum ToolState {
    Present {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        version: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        credential: Option<bool>,
    },
    Missing,
}

/// claudectl's `capabilities`: all four keys are required by its reader (a beat without
/// `claudectl_version` is not recorded), so ours always has them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    pub claudectl_version: String,
    pub os: String,
    pub arch: String,
    pub tools: BTreeMap<String, ToolState>,
}

/// This hub's `capabilities` for a claudectl peer: `software` where claudectl's version goes
/// (its `relay peers` prints "claudectl <that>"), this build's OS and architecture, and one
/// tool per installed agent manifest: present (with its version and credential, when known)
/// when its ACP or headless program is on the PATH, else missing. claudectl's `--requires
/// claude` then checks the manifest this hub would run for its tasks.
pub fn capabilities_for(software: &str, cards: &[AgentCard]) -> Capabilities {
    let tools = cards
        .iter()
        .map(|c| {
            let state = if c.acp || c.headless {
                ToolState::Present {
                    version: c.version.clone(),
                    credential: c.credential,
                }
            } else {
                ToolState::Missing
            };
            (c.name.clone(), state)
        })
        .collect();
    Capabilities {
        claudectl_version: software.to_owned(),
        os: std::env::consts::OS.to_owned(),
        arch: std::env::consts::ARCH.to_owned(),
        tools,
    }
}

/// The keys claudectl's beat adds, written into a beat's payload: `capabilities` always,
/// `headroom` when given (only on a link that agreed it).
pub fn add_to_beat(payload: &mut Value, caps: &Capabilities, headroom: Option<&Headroom>) {
    if let Value::Object(map) = payload {
        map.insert("capabilities".into(), json!(caps));
        if let Some(h) = headroom {
            map.insert("headroom".into(), json!(h));
        }
    }
}

/// One of a claudectl peer's sessions, as kept here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerSession {
    /// Its name in the directory: the `session_id`, else `pid-<pid>`.
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// claudectl's status word (`Processing`, `Needs Input`, `Waiting`, `Idle`, `Finished`,
    /// `Unknown`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
}

/// What a claudectl peer's last beat said of its machine (each part None when the beat
/// did not carry it, or carried it malformed).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PeerWorker {
    /// None: the beat had no `sessions`; Some(empty): it has none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sessions: Option<Vec<WorkerSession>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub capabilities: Option<Capabilities>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub listen_addrs: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headroom: Option<Headroom>,
    /// Sessions the beat listed past the directory caps (not kept).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub sessions_dropped: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl PeerWorker {
    /// Whether the beat said anything of its machine (0.64's `{}` does not).
    pub fn is_empty(&self) -> bool {
        self.sessions.is_none()
            && self.capabilities.is_none()
            && self.listen_addrs.is_empty()
            && self.headroom.is_none()
    }
}

/// The liveness state a claudectl session's status word stands for: `Processing` is busy,
/// `Needs Input` (a permission prompt) waits on someone, `Waiting` and `Idle` are idle (done
/// with a turn), `Finished` is gone; any other word is unknown.
pub fn session_state(status: &str) -> AgentState {
    match status {
        "Processing" => AgentState::Busy,
        "Needs Input" => AgentState::Waiting,
        "Waiting" | "Idle" => AgentState::Idle,
        "Finished" => AgentState::Gone,
        _ => AgentState::Unknown,
    }
}

/// Reads a claudectl beat's payload: what it says of the machine, and its sessions as a
/// directory (one entry per session, at most `caps.max_agents`, within `caps.max_bytes`).
/// Never fails: a piece that does not parse is left out.
pub fn read_beat(payload: &Value, caps: DirectoryCaps) -> (PeerWorker, Directory) {
    let mut worker = PeerWorker::default();
    let mut directory = Directory::default();
    let Value::Object(map) = payload else {
        return (worker, directory);
    };
    if let Some(Value::Array(list)) = map.get("sessions") {
        let mut kept = Vec::new();
        for s in list {
            let Some(session) = read_session(s) else {
                continue;
            };
            if directory.agents.contains_key(&session.name) {
                continue;
            }
            let state = session
                .status
                .as_deref()
                .map_or(AgentState::Unknown, session_state);
            let entry = AgentEntry {
                parked: 0,
                queued: 0,
                state,
                since_ms: None,
            };
            directory.agents.insert(session.name.clone(), entry);
            if directory.fits(caps).is_err() {
                directory.agents.remove(&session.name);
                worker.sessions_dropped += 1;
                continue;
            }
            kept.push(session);
        }
        worker.sessions = Some(kept);
    }
    if let Some(v) = map.get("capabilities") {
        worker.capabilities = serde_json::from_value::<Capabilities>(v.clone())
            .ok()
            .map(bounded_capabilities);
    }
    if let Some(Value::Array(addrs)) = map.get("listen_addrs") {
        worker.listen_addrs = addrs
            .iter()
            .filter_map(Value::as_str)
            .filter(|a| a.parse::<std::net::SocketAddr>().is_ok())
            .take(MAX_LISTEN_ADDRS)
            .map(str::to_owned)
            .collect();
    }
    worker.headroom = read_headroom(payload);
    (worker, directory)
}

/// A beat's `headroom`, in either dialect (claudectl's, and our hubs' since issue 38), within
/// bounds; None when absent or malformed (a peer that did not say).
pub fn read_headroom(payload: &Value) -> Option<Headroom> {
    let v = payload.get("headroom")?;
    serde_json::from_value::<Headroom>(v.clone())
        .ok()
        .map(Headroom::bounded)
}

/// Whether a payload is claudectl's beat (sessions, no directory of ours): this project's
/// full and delta beats carry `agents` or `base`.
pub fn is_claudectl_beat(payload: &Value) -> bool {
    let Value::Object(map) = payload else {
        return false;
    };
    !map.contains_key("agents") && !map.contains_key("base")
}

fn read_session(v: &Value) -> Option<WorkerSession> {
    let Value::Object(m) = v else {
        return None;
    };
    let name = match (m.get("session_id"), m.get("pid")) {
        (Some(Value::String(id)), _) if showable(id) => id.clone(),
        (_, Some(Value::Number(pid))) => format!("pid-{}", pid.as_u64()?),
        _ => return None,
    };
    Some(WorkerSession {
        name,
        project: short_str(m, "project"),
        status: short_str(m, "status"),
    })
}

/// A session id fit to be a directory name: 1–128 bytes, no `@`, no control or space
/// characters (the rule `who`'s remote names follow, `hub::remote_presence`).
fn showable(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_FIELD_BYTES
        && !s
            .chars()
            .any(|c| c == '@' || c.is_whitespace() || crate::kernel::text::is_unsafe(c))
}

fn short_str(m: &Map<String, Value>, key: &str) -> Option<String> {
    m.get(key)
        .and_then(Value::as_str)
        .map(|s| cut(s, MAX_FIELD_BYTES))
}

/// `s` cut to at most `max` bytes on a character boundary, every character the one sanitiser
/// calls unsafe (`crate::kernel::text`: control characters, escape sequences among them, and bidi or
/// invisible formatting) shown as `?`: these strings are only ever shown to people (`relay
/// peers`), and a peer must not reach their terminal.
fn cut(s: &str, max: usize) -> String {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end]
        .chars()
        .map(|c| {
            if crate::kernel::text::is_unsafe(c) {
                '?'
            } else {
                c
            }
        })
        .collect()
}

fn bounded_capabilities(c: Capabilities) -> Capabilities {
    let tools = c
        .tools
        .into_iter()
        .filter(|(name, _)| {
            !name.is_empty()
                && name.len() <= MAX_FIELD_BYTES
                && !crate::kernel::text::has_unsafe(name)
        })
        .take(MAX_TOOLS)
        .map(|(name, state)| {
            let state = match state {
                ToolState::Present {
                    version,
                    credential,
                } => ToolState::Present {
                    version: version.map(|v| cut(&v, MAX_FIELD_BYTES)),
                    credential,
                },
                ToolState::Missing => ToolState::Missing,
            };
            (name, state)
        })
        .collect();
    Capabilities {
        claudectl_version: cut(&c.claudectl_version, MAX_FIELD_BYTES),
        os: cut(&c.os, MAX_FIELD_BYTES),
        arch: cut(&c.arch, MAX_FIELD_BYTES),
        tools,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// claudectl 0.92.4's beat as its `relay serve` sends it (relay-compat-0.92.md §4).
    fn ctl_beat() -> Value {
        json!({
            "worker_id": "ctl",
            "timestamp": 1_764_000_000_000_i64,
            "sessions": [
                {"pid": 4242, "session_id": "3f2a9c1e-1111-2222-3333-444455556666",
                 "project": "backend", "status": "Processing", "cost_usd": 0.12},
                {"pid": 4343, "project": "frontend", "status": "Idle"},
                {"pid": 4444, "session_id": "done", "status": "Finished"}
            ],
            "capabilities": {
                "claudectl_version": "0.92.4", "os": "linux", "arch": "x86_64",
                "tools": {"claude": {"state": "present", "version": "2.1.332", "credential": true},
                          "git": {"state": "present", "version": "2.47.3"},
                          "cargo": {"state": "missing"}}
            },
            "listen_addrs": ["192.168.1.7:9847", "[fd7a::1]:9847", "not an address"],
            "headroom": {"mem_free_mb": 4096, "load_per_core": 0.25, "disk_free_mb": 90000,
                         "running_tasks": 1, "max_tasks": 4, "tags": ["gpu", "bad tag"]}
        })
    }

    #[test]
    fn a_claudectl_beat_is_read_whole() {
        let (w, d) = read_beat(&ctl_beat(), DirectoryCaps::default());
        let names: Vec<&str> = d.agents.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            ["3f2a9c1e-1111-2222-3333-444455556666", "done", "pid-4343"]
        );
        assert_eq!(
            d.agents["3f2a9c1e-1111-2222-3333-444455556666"].state,
            AgentState::Busy
        );
        assert_eq!(d.agents["pid-4343"].state, AgentState::Idle);
        assert_eq!(d.agents["done"].state, AgentState::Gone);
        let sessions = w.sessions.as_ref().unwrap();
        assert_eq!(sessions.len(), 3);
        assert_eq!(sessions[0].project.as_deref(), Some("backend"));
        let caps = w.capabilities.as_ref().unwrap();
        assert_eq!(caps.claudectl_version, "0.92.4");
        assert_eq!(caps.tools["cargo"], ToolState::Missing);
        assert_eq!(w.listen_addrs, ["192.168.1.7:9847", "[fd7a::1]:9847"]);
        let h = w.headroom.as_ref().unwrap();
        assert_eq!(h.mem_free_mb, Some(4096));
        assert_eq!(h.max_tasks, Some(4));
        assert_eq!(h.tags, ["gpu"], "an invalid tag is not kept");
        assert!(!w.is_empty());
    }

    #[test]
    fn the_064_beat_says_nothing() {
        let (w, d) = read_beat(&json!({}), DirectoryCaps::default());
        assert!(w.is_empty());
        assert!(d.agents.is_empty());
        assert!(is_claudectl_beat(&json!({})));
        assert!(!is_claudectl_beat(&json!({"agents": {}, "sessions": []})));
        assert!(!is_claudectl_beat(&json!({"seq": 3, "base": 2})));
    }

    #[test]
    fn hostile_beats_are_bounded_and_never_fail() {
        // Sessions past the directory caps, names that pose as other peers, huge strings,
        // wrong types everywhere.
        let mut sessions: Vec<Value> = (0..5000)
            .map(|i| json!({"session_id": format!("s{i}"), "status": "Idle"}))
            .collect();
        sessions.push(json!({"session_id": "x@other", "status": "Idle"}));
        sessions.push(json!({"session_id": "a\u{1b}]52;c;evil\u{7}", "status": "Idle"}));
        sessions.push(json!({"session_id": 7}));
        sessions.push(json!("not an object"));
        sessions.push(json!({"pid": -1}));
        let beat = json!({
            "sessions": sessions,
            "capabilities": {"claudectl_version": "v".repeat(100_000), "os": "l", "arch": "a",
                "tools": (0..500).map(|i| (format!("t{i}"), json!({"state": "missing"})))
                    .collect::<Map<String, Value>>()},
            "listen_addrs": (0..100).map(|i| format!("10.0.0.{}:1", i % 250)).collect::<Vec<_>>(),
            "headroom": {"running_tasks": 1, "load_per_core": -3.0,
                "tags": (0..100).map(|i| format!("t{i}")).collect::<Vec<_>>()},
        });
        let caps = DirectoryCaps {
            max_agents: 100,
            max_bytes: 1 << 20,
        };
        let (w, d) = read_beat(&beat, caps);
        assert_eq!(d.agents.len(), 100);
        assert_eq!(w.sessions.as_ref().unwrap().len(), 100);
        assert!(w.sessions_dropped > 4000);
        assert!(d.agents.keys().all(|n| !n.contains('@') && n.is_ascii()));
        let c = w.capabilities.unwrap();
        assert_eq!(c.claudectl_version.len(), MAX_FIELD_BYTES);
        assert_eq!(c.tools.len(), MAX_TOOLS);
        assert_eq!(w.listen_addrs.len(), MAX_LISTEN_ADDRS);
        let h = w.headroom.unwrap();
        assert_eq!(h.tags.len(), MAX_TAGS);
        assert_eq!(h.load_per_core, None, "a negative load is unknown");
        // Strings a peer chooses never carry a control character (a terminal escape) out.
        let (w, _) = read_beat(
            &json!({"sessions": [{"pid": 1, "project": "a\u{1b}[2Jb", "status": "Idle\u{7}"}],
                    "capabilities": {"claudectl_version": "x\u{9b}y", "os": "l", "arch": "a",
                        "tools": {"t\u{1b}": {"state": "missing"}, "git": {"state": "present", "version": "\u{1b}]52;c;x\u{7}"}}}}),
            DirectoryCaps::default(),
        );
        let s = &w.sessions.as_ref().unwrap()[0];
        assert_eq!(s.project.as_deref(), Some("a?[2Jb"));
        assert_eq!(s.status.as_deref(), Some("Idle?"));
        let c = w.capabilities.unwrap();
        assert_eq!(c.claudectl_version, "x?y");
        assert!(!c.tools.contains_key("t\u{1b}"));
        assert_eq!(
            c.tools["git"],
            ToolState::Present {
                version: Some("?]52;c;x?".into()),
                credential: None
            }
        );
        // Wrong types: every piece is left out, nothing fails.
        let (w, d) = read_beat(
            &json!({"sessions": "x", "capabilities": [], "listen_addrs": {}, "headroom": "h"}),
            DirectoryCaps::default(),
        );
        assert!(w.is_empty());
        assert!(d.agents.is_empty());
        let (w, _) = read_beat(&json!("not an object"), DirectoryCaps::default());
        assert!(w.is_empty());
    }

    #[test]
    fn our_capabilities_name_each_manifest() {
        let cards = vec![
            AgentCard {
                name: "claude".into(),
                version: Some("2.1.332".into()),
                acp: true,
                headless: true,
                credential: Some(true),
            },
            AgentCard {
                name: "opencode".into(),
                version: None,
                acp: false,
                headless: false,
                credential: None,
            },
        ];
        let c = capabilities_for("agent-hub 0.1.0", &cards);
        let v = json!(c);
        assert_eq!(v["claudectl_version"], "agent-hub 0.1.0");
        assert_eq!(
            v["tools"]["claude"],
            json!({"state": "present", "version": "2.1.332", "credential": true})
        );
        assert_eq!(v["tools"]["opencode"], json!({"state": "missing"}));
        assert_eq!(v["os"], std::env::consts::OS);
        // What we send reads back as what a claudectl peer's reader would keep.
        let mut payload = json!({"worker_id": "hub", "sessions": []});
        let h = Headroom {
            mem_free_mb: Some(1),
            load_per_core: Some(0.5),
            disk_free_mb: None,
            running_tasks: 2,
            max_tasks: Some(4),
            tags: vec!["gpu".into()],
        };
        add_to_beat(&mut payload, &c, Some(&h));
        assert_eq!(
            payload["headroom"],
            json!({"mem_free_mb": 1, "load_per_core": 0.5, "running_tasks": 2, "max_tasks": 4, "tags": ["gpu"]})
        );
        let (w, _) = read_beat(&payload, DirectoryCaps::default());
        assert_eq!(w.capabilities, Some(c));
        assert_eq!(w.headroom, Some(h));
    }

    #[test]
    fn status_words_map_to_states() {
        assert_eq!(session_state("Needs Input"), AgentState::Waiting);
        assert_eq!(session_state("Waiting"), AgentState::Idle);
        assert_eq!(session_state("processing"), AgentState::Unknown);
    }
}
