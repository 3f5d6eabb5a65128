//! What one ACP session is given (docs/acp.md "Configuration"): the task (cwd, prompt), the
//! MCP servers attached at birth, the permission policy, and every limit and deadline with its
//! default and its upper bound.
//!
//! Owns validation of all of it, without IO: `cwd` must be absolute (whether it exists is the
//! runner's check), each MCP server's command absolute (ACP asks for it: docs/acp.md "What we
//! send"), names and env names plain. Refuses: reading any file, and holding the prompt anywhere a
//! log could see it.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How `session/request_permission` is answered (§1.7; docs/acp.md "Permission requests").
/// Ordered by how much runs unasked, `Reject < Ask < Allow`, so a task's effective policy is
/// the `min` of what its delegator asked for and the operator's bound (issue 37 design §1).
///
/// `Default` is `Reject`: a session on its own has nobody to hold a request for. The hub's
/// config default is `Ask` (`tasks.permission`, host's `config::tasks`), where the runner
/// carries each held request to the task book and its answer back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum PermissionPolicy {
    /// Pick `reject_once`, else `reject_always`, else answer `cancelled`.
    #[default]
    Reject,
    /// Hold the request until the owner answers it (`Session::answer`); pre-approved
    /// requests and the hub's own tools are allowed at once, and a request that cannot be
    /// held gets the `PermissionFallback`.
    Ask,
    /// Pick `allow_once`, else `allow_always`; if no allow option is offered, behave as
    /// `Reject`.
    Allow,
}

impl PermissionPolicy {
    pub const TAGS: &'static [&'static str] = &["ask", "reject", "allow"];

    pub fn from_tag(s: &str) -> Option<PermissionPolicy> {
        match s {
            "ask" => Some(PermissionPolicy::Ask),
            "reject" => Some(PermissionPolicy::Reject),
            "allow" => Some(PermissionPolicy::Allow),
            _ => None,
        }
    }

    pub fn tag(self) -> &'static str {
        match self {
            PermissionPolicy::Reject => "reject",
            PermissionPolicy::Ask => "ask",
            PermissionPolicy::Allow => "allow",
        }
    }

    /// True when the operator allows everything the agent asks, so an agent that cannot be
    /// put in a mode where it asks may run anyway (docs/acp.md "Session modes"). Only an
    /// explicit `allow` does; every policy that can say no (`reject`, and `ask`, where a
    /// person may) needs the agent to ask.
    pub fn may_run_unasked(self) -> bool {
        matches!(self, PermissionPolicy::Allow)
    }
}

/// What a request gets when nobody answers it in time, or it cannot be held at all
/// (`tasks.permission_fallback`, issue 37 design §4.5). There is no allow fallback: nothing
/// is ever allowed unasked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PermissionFallback {
    /// The agent's `reject_once`, else `reject_always`, else `cancelled`.
    #[default]
    Reject,
    /// `cancelled`, which the captured agents take as "this tool is refused" and go on
    /// with their turn (../notes capture §4; only `session/cancel` stops a turn).
    Cancel,
}

impl PermissionFallback {
    pub const TAGS: &'static [&'static str] = &["reject", "cancel"];

    pub fn from_tag(s: &str) -> Option<PermissionFallback> {
        match s {
            "reject" => Some(PermissionFallback::Reject),
            "cancel" => Some(PermissionFallback::Cancel),
            _ => None,
        }
    }

    pub fn tag(self) -> &'static str {
        match self {
            PermissionFallback::Reject => "reject",
            PermissionFallback::Cancel => "cancel",
        }
    }
}

/// How the session treats requests beyond the plain policy (issue 37 design §2-§4): the
/// hub's own MCP server, the delegator's pre-approval rules, the fallback and the cap on
/// requests held at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    /// The task-unique name the hub's MCP server is attached under
    /// (`permission::hub_server_name`); a request for one of its tools is allowed under
    /// every policy. Must name one of `SessionConfig::mcp_servers`. None: no such server.
    pub hub_server: Option<String>,
    /// Requests these match are allowed at once under `Ask` (never under `Reject`).
    pub allow_rules: Vec<super::permission::AllowRule>,
    pub fallback: PermissionFallback,
    /// Requests held at once (`tasks.max_open_requests_per_task`); one more gets the
    /// fallback at once.
    pub max_open_requests: u32,
}

/// `tasks.max_open_requests_per_task`: its default and its bound.
pub const DEFAULT_MAX_OPEN_REQUESTS: u32 = 8;
pub const MAX_OPEN_REQUESTS: u32 = 64;

impl Default for Approval {
    fn default() -> Approval {
        Approval {
            hub_server: None,
            allow_rules: Vec::new(),
            fallback: PermissionFallback::default(),
            max_open_requests: DEFAULT_MAX_OPEN_REQUESTS,
        }
    }
}

/// One stdio MCP server entry of `session/new` (§1.4). `env` goes on the wire as
/// `[{name, value}]`; its values are treated as secrets: never logged, and redacted from any
/// agent text that echoes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServer {
    pub name: String,
    pub command: PathBuf,
    pub args: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// Limits and deadlines. Every field has a default (`Limits::default()`) and an upper bound
/// checked by `validate` (`Limits::MAX`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Longest line accepted from the agent, without its newline. One line over it fails the
    /// session ("agent spoke garbage"). Tool updates carry whole file diffs, so it is large.
    pub max_line_bytes: usize,
    /// Malformed lines (not JSON, not JSON-RPC) tolerated; one more fails the session.
    pub max_malformed_lines: u32,
    /// Most bytes of the agent's text kept for the outcome; the rest is dropped and the
    /// outcome says `truncated`.
    pub max_text_bytes: usize,
    /// Largest prompt accepted by `Session::new`.
    pub max_prompt_bytes: usize,
    /// Most requests the agent may send us in one session (each costs an answer line).
    pub max_agent_requests: u64,
    /// Most log events one session emits; later ones are counted, and the count is logged
    /// once at the end.
    pub max_log_events: u32,
    /// Wait for the `initialize` response, from the session's start.
    pub initialize_timeout_ms: u64,
    /// Wait for the `session/new` response (agents start their MCP servers first, §1.4).
    pub session_new_timeout_ms: u64,
    /// After `session/cancel`, wait this long for the prompt's response before giving up.
    pub cancel_grace_ms: u64,
    /// At most one `Progress` event per interval.
    pub progress_interval_ms: u64,
    /// After the agent closes its stdout, wait this long for its exit status before deciding
    /// without it; after it exits, this long for the rest of its stdout.
    pub eof_exit_wait_ms: u64,
    /// After `CloseStdin`, wait this long for the agent to exit before `Signal(Term)`.
    pub stdin_grace_ms: u64,
    /// After `Signal(Term)`, wait this long before `Signal(Kill)`.
    pub term_grace_ms: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_line_bytes: 16 << 20,
            max_malformed_lines: 16,
            max_text_bytes: 64 << 10,
            max_prompt_bytes: 1 << 20,
            max_agent_requests: 10_000,
            max_log_events: 200,
            initialize_timeout_ms: 60_000,
            session_new_timeout_ms: 120_000,
            cancel_grace_ms: 15_000,
            progress_interval_ms: 2_000,
            eof_exit_wait_ms: 2_000,
            stdin_grace_ms: 3_000,
            term_grace_ms: 5_000,
        }
    }
}

impl Limits {
    /// Upper bounds. A bound is there so a typo (an extra three zeros) fails at startup
    /// instead of letting one agent hold a gigabyte or a deadline of a year.
    pub const MAX: Limits = Limits {
        max_line_bytes: 256 << 20,
        max_malformed_lines: 100_000,
        max_text_bytes: 16 << 20,
        max_prompt_bytes: 16 << 20,
        max_agent_requests: 10_000_000,
        max_log_events: 100_000,
        initialize_timeout_ms: 3_600_000,
        session_new_timeout_ms: 3_600_000,
        cancel_grace_ms: 3_600_000,
        progress_interval_ms: 3_600_000,
        eof_exit_wait_ms: 600_000,
        stdin_grace_ms: 600_000,
        term_grace_ms: 600_000,
    };

    /// Every field within `Limits::MAX`; the line cap at least 1 KiB and the per-step
    /// deadlines nonzero, since a zero there could never be met.
    pub fn validate(&self) -> Result<(), SessionConfigError> {
        let m = &Limits::MAX;
        let checks: [(&'static str, u64, u64, u64); 13] = [
            (
                "max_line_bytes",
                self.max_line_bytes as u64,
                1024,
                m.max_line_bytes as u64,
            ),
            (
                "max_malformed_lines",
                self.max_malformed_lines.into(),
                0,
                m.max_malformed_lines.into(),
            ),
            (
                "max_text_bytes",
                self.max_text_bytes as u64,
                0,
                m.max_text_bytes as u64,
            ),
            (
                "max_prompt_bytes",
                self.max_prompt_bytes as u64,
                1,
                m.max_prompt_bytes as u64,
            ),
            (
                "max_agent_requests",
                self.max_agent_requests,
                0,
                m.max_agent_requests,
            ),
            (
                "max_log_events",
                self.max_log_events.into(),
                0,
                m.max_log_events.into(),
            ),
            (
                "initialize_timeout_ms",
                self.initialize_timeout_ms,
                1,
                m.initialize_timeout_ms,
            ),
            (
                "session_new_timeout_ms",
                self.session_new_timeout_ms,
                1,
                m.session_new_timeout_ms,
            ),
            (
                "cancel_grace_ms",
                self.cancel_grace_ms,
                0,
                m.cancel_grace_ms,
            ),
            (
                "progress_interval_ms",
                self.progress_interval_ms,
                0,
                m.progress_interval_ms,
            ),
            (
                "eof_exit_wait_ms",
                self.eof_exit_wait_ms,
                0,
                m.eof_exit_wait_ms,
            ),
            ("stdin_grace_ms", self.stdin_grace_ms, 0, m.stdin_grace_ms),
            ("term_grace_ms", self.term_grace_ms, 0, m.term_grace_ms),
        ];
        for (key, value, min, max) in checks {
            if value < min || value > max {
                return Err(SessionConfigError::Limit {
                    key,
                    value,
                    min,
                    max,
                });
            }
        }
        Ok(())
    }
}

/// Everything one session needs. One task = one agent process = one session.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The task's working directory, absolute. Sent as `session/new.cwd`.
    pub cwd: PathBuf,
    /// The task's prompt, sent as one text ContentBlock. Never logged.
    pub prompt: String,
    /// The MCP servers the agent starts for this session (the hub's own `agent-hub mcp`).
    pub mcp_servers: Vec<McpServer>,
    pub permission: PermissionPolicy,
    /// The hub's own tools, pre-approval, the fallback and the cap on held requests.
    pub approval: Approval,
    /// The session mode ids in which this agent asks the client before it acts, preferred
    /// first (its manifest's `run.ask_modes`); None for `modes::FALLBACK_ASK_MODES`.
    pub ask_modes: Option<Vec<String>>,
    /// The task's wall-clock budget, from `Session::new`'s `now`: at its end the session
    /// cancels the prompt and reports `TimedOut`.
    pub task_timeout_ms: u64,
    pub limits: Limits,
    /// Keep the session after a completed turn for a follow-up (`Session::prompt`; issue 38
    /// design §2): the task book keeps it only while `tasks.session_keep_secs` (narrowed by
    /// the delegation's `keepSecs`) is above 0. False: the session closes after its first
    /// outcome, as before issue 38.
    pub keep_session: bool,
}

/// Longest task budget accepted: one week.
pub const MAX_TASK_TIMEOUT_MS: u64 = 7 * 24 * 3_600_000;
/// Most MCP servers in one `session/new`, and most args/env entries per server.
pub const MAX_MCP_SERVERS: usize = 16;
pub const MAX_MCP_ITEMS: usize = 256;

impl SessionConfig {
    /// A config with the default policy and limits.
    pub fn new(cwd: impl Into<PathBuf>, prompt: impl Into<String>, task_timeout_ms: u64) -> Self {
        SessionConfig {
            cwd: cwd.into(),
            prompt: prompt.into(),
            mcp_servers: Vec::new(),
            permission: PermissionPolicy::default(),
            approval: Approval::default(),
            ask_modes: None,
            task_timeout_ms,
            limits: Limits::default(),
            keep_session: false,
        }
    }

    pub fn task_timeout(&self) -> Duration {
        Duration::from_millis(self.task_timeout_ms)
    }

    pub fn validate(&self) -> Result<(), SessionConfigError> {
        self.limits.validate()?;
        if !self.cwd.is_absolute() {
            return Err(SessionConfigError::CwdNotAbsolute);
        }
        if self.cwd.to_str().is_none() {
            return Err(SessionConfigError::NotUtf8("cwd"));
        }
        if self.prompt.trim().is_empty() {
            return Err(SessionConfigError::EmptyPrompt);
        }
        if self.prompt.len() > self.limits.max_prompt_bytes {
            return Err(SessionConfigError::PromptTooLong {
                bytes: self.prompt.len(),
                max: self.limits.max_prompt_bytes,
            });
        }
        if self.task_timeout_ms == 0 || self.task_timeout_ms > MAX_TASK_TIMEOUT_MS {
            return Err(SessionConfigError::Limit {
                key: "task_timeout_ms",
                value: self.task_timeout_ms,
                min: 1,
                max: MAX_TASK_TIMEOUT_MS,
            });
        }
        if let Some(modes) = &self.ask_modes {
            check_ask_modes(modes).map_err(SessionConfigError::AskModes)?;
        }
        if self.mcp_servers.len() > MAX_MCP_SERVERS {
            return Err(SessionConfigError::McpServer(format!(
                "{} servers given, at most {MAX_MCP_SERVERS}",
                self.mcp_servers.len()
            )));
        }
        let mut names = Vec::new();
        for s in &self.mcp_servers {
            check_server(s)?;
            if names.contains(&s.name.as_str()) {
                return Err(SessionConfigError::McpServer(format!(
                    "server name {:?} given twice",
                    s.name
                )));
            }
            names.push(&s.name);
        }
        self.check_approval(&names)
    }

    fn check_approval(&self, servers: &[&str]) -> Result<(), SessionConfigError> {
        let a = &self.approval;
        if a.max_open_requests == 0 || a.max_open_requests > MAX_OPEN_REQUESTS {
            return Err(SessionConfigError::Limit {
                key: "max_open_requests_per_task",
                value: a.max_open_requests.into(),
                min: 1,
                max: MAX_OPEN_REQUESTS.into(),
            });
        }
        if a.allow_rules.len() > super::permission::MAX_ALLOW_RULES {
            return Err(SessionConfigError::AllowRules(a.allow_rules.len()));
        }
        if let Some(hub) = &a.hub_server {
            // Recognising the hub's tools by a server the agent was never given would be
            // a mistake of the caller's; say so rather than recognise nothing.
            if !servers.contains(&hub.as_str()) {
                return Err(SessionConfigError::McpServer(format!(
                    "the hub's server {hub:?} is not among the servers given"
                )));
            }
        }
        Ok(())
    }
}

/// Most ids in `ask_modes`.
pub const MAX_ASK_MODES: usize = 16;

/// `ask_modes` as a manifest may give it: at most `MAX_ASK_MODES` ids, each non-empty, at most
/// `modes::MAX_MODE_ID_BYTES`, without control characters (they are echoed to the agent and
/// logged). Shared with the manifest loader, so a manifest that loads gives a valid config.
pub fn check_ask_modes(modes: &[String]) -> Result<(), AskModesError> {
    if modes.len() > MAX_ASK_MODES {
        return Err(AskModesError::TooMany { count: modes.len() });
    }
    for (i, m) in modes.iter().enumerate() {
        if m.is_empty()
            || m.len() > super::modes::MAX_MODE_ID_BYTES
            || m.chars().any(char::is_control)
        {
            return Err(AskModesError::BadId { index: i });
        }
    }
    Ok(())
}

/// Why an `ask_modes` list is refused (`check_ask_modes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AskModesError {
    /// More than `MAX_ASK_MODES` ids.
    TooMany { count: usize },
    /// The id at `index` is empty, too long or holds a control character.
    BadId { index: usize },
}

impl fmt::Display for AskModesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AskModesError::TooMany { count } => {
                write!(f, "{count} mode ids, at most {MAX_ASK_MODES}")
            }
            AskModesError::BadId { index } => write!(
                f,
                "mode id {index} must be 1-{} bytes without control characters",
                super::modes::MAX_MODE_ID_BYTES
            ),
        }
    }
}

impl std::error::Error for AskModesError {}

fn check_server(s: &McpServer) -> Result<(), SessionConfigError> {
    let bad = |why: String| Err(SessionConfigError::McpServer(why));
    if !is_plain_name(&s.name) {
        return bad(format!(
            "server name {:?} must be 1-64 of [A-Za-z0-9_-]",
            s.name
        ));
    }
    if !Path::new(&s.command).is_absolute() || s.command.to_str().is_none() {
        return bad(format!(
            "server {:?}: command must be an absolute UTF-8 path",
            s.name
        ));
    }
    if s.args.len() > MAX_MCP_ITEMS || s.env.len() > MAX_MCP_ITEMS {
        return bad(format!(
            "server {:?}: at most {MAX_MCP_ITEMS} args and env entries",
            s.name
        ));
    }
    if s.args.iter().any(|a| a.contains('\0')) {
        return bad(format!("server {:?}: an arg holds a NUL byte", s.name));
    }
    for (k, v) in &s.env {
        let plain = !k.is_empty()
            && k.len() <= 128
            && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
            && !k.as_bytes()[0].is_ascii_digit();
        if !plain {
            // The name only: the value may be a secret.
            return bad(format!(
                "server {:?}: env name {:?} must be [A-Za-z_][A-Za-z0-9_]*",
                s.name, k
            ));
        }
        if v.contains('\0') {
            return bad(format!("server {:?}: env {k} holds a NUL byte", s.name));
        }
    }
    Ok(())
}

fn is_plain_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A session that cannot start. Messages never include the prompt or env values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionConfigError {
    CwdNotAbsolute,
    NotUtf8(&'static str),
    EmptyPrompt,
    PromptTooLong {
        bytes: usize,
        max: usize,
    },
    Limit {
        key: &'static str,
        value: u64,
        min: u64,
        max: u64,
    },
    McpServer(String),
    AskModes(AskModesError),
    /// More pre-approval rules than `permission::MAX_ALLOW_RULES`.
    AllowRules(usize),
}

impl fmt::Display for SessionConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SessionConfigError::CwdNotAbsolute => {
                write!(f, "the task's cwd must be an absolute path")
            }
            SessionConfigError::NotUtf8(what) => write!(f, "the task's {what} must be UTF-8"),
            SessionConfigError::EmptyPrompt => write!(f, "the task's prompt is empty"),
            SessionConfigError::PromptTooLong { bytes, max } => {
                write!(f, "the prompt is {bytes} bytes; the limit is {max}")
            }
            SessionConfigError::Limit {
                key,
                value,
                min,
                max,
            } => write!(f, "acp {key} = {value} is outside {min}..={max}"),
            SessionConfigError::McpServer(why) => write!(f, "mcp server entry: {why}"),
            SessionConfigError::AskModes(why) => write!(f, "ask_modes: {why}"),
            SessionConfigError::AllowRules(n) => write!(
                f,
                "{n} allow rules given, at most {}",
                super::permission::MAX_ALLOW_RULES
            ),
        }
    }
}

impl std::error::Error for SessionConfigError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn hub_server() -> McpServer {
        McpServer {
            name: "agent-hub".into(),
            command: "/usr/local/bin/agent-hub".into(),
            args: vec!["mcp".into()],
            env: vec![("AGENT_HUB_TOKEN_FILE".into(), "/run/t/tok".into())],
        }
    }

    #[test]
    fn defaults_validate_and_max_validates() {
        Limits::default().validate().unwrap();
        Limits::MAX.validate().unwrap();
        let mut c = SessionConfig::new("/tmp/x", "hi", 1000);
        c.mcp_servers.push(hub_server());
        c.validate().unwrap();
    }

    #[test]
    fn every_bound_is_checked() {
        let l = Limits {
            max_line_bytes: Limits::MAX.max_line_bytes + 1,
            ..Limits::default()
        };
        assert!(matches!(
            l.validate(),
            Err(SessionConfigError::Limit {
                key: "max_line_bytes",
                ..
            })
        ));
        let l = Limits {
            max_line_bytes: 10,
            ..Limits::default()
        };
        assert!(l.validate().is_err());
        let l = Limits {
            initialize_timeout_ms: 0,
            ..Limits::default()
        };
        assert!(matches!(
            l.validate(),
            Err(SessionConfigError::Limit {
                key: "initialize_timeout_ms",
                ..
            })
        ));
        let l = Limits {
            term_grace_ms: u64::MAX,
            ..Limits::default()
        };
        assert!(l.validate().is_err());
    }

    #[test]
    fn task_checks() {
        let ok = SessionConfig::new("/w", "p", 1);
        ok.validate().unwrap();
        assert_eq!(
            SessionConfig::new("rel/dir", "p", 1).validate(),
            Err(SessionConfigError::CwdNotAbsolute)
        );
        assert_eq!(
            SessionConfig::new("/w", " \n", 1).validate(),
            Err(SessionConfigError::EmptyPrompt)
        );
        assert!(SessionConfig::new("/w", "p", 0).validate().is_err());
        assert!(SessionConfig::new("/w", "p", MAX_TASK_TIMEOUT_MS + 1)
            .validate()
            .is_err());
        let mut big = SessionConfig::new("/w", "x".repeat(11), 1);
        big.limits.max_prompt_bytes = 10;
        assert_eq!(
            big.validate(),
            Err(SessionConfigError::PromptTooLong { bytes: 11, max: 10 })
        );
    }

    #[test]
    fn ask_modes_are_checked() {
        let mut c = SessionConfig::new("/w", "p", 1);
        c.ask_modes = Some(vec!["default".into(), "read-only".into()]);
        c.validate().unwrap();
        c.ask_modes = Some(Vec::new());
        c.validate().unwrap();
        for bad in [
            vec![String::new()],
            vec!["a\u{1b}]0;x".into()],
            vec!["m".repeat(crate::acp::modes::MAX_MODE_ID_BYTES + 1)],
            vec!["m".to_owned(); MAX_ASK_MODES + 1],
        ] {
            c.ask_modes = Some(bad.clone());
            assert!(
                matches!(c.validate(), Err(SessionConfigError::AskModes(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn server_checks_never_echo_env_values() {
        let mut c = SessionConfig::new("/w", "p", 1);
        let mut s = hub_server();
        s.command = "agent-hub".into();
        c.mcp_servers = vec![s];
        assert!(c.validate().unwrap_err().to_string().contains("absolute"));
        let mut s = hub_server();
        s.env = vec![("BAD NAME".into(), "sekret-value-123".into())];
        c.mcp_servers = vec![s];
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("BAD NAME") && !e.contains("sekret"), "{e}");
        let mut s = hub_server();
        s.env = vec![("OK".into(), "sek\0ret-value-123".into())];
        c.mcp_servers = vec![s];
        let e = c.validate().unwrap_err().to_string();
        assert!(!e.contains("sek"), "{e}");
        let mut s = hub_server();
        s.name = "a b".into();
        c.mcp_servers = vec![s];
        assert!(c.validate().is_err());
        c.mcp_servers = vec![hub_server(), hub_server()];
        assert!(c.validate().unwrap_err().to_string().contains("twice"));
    }

    #[test]
    fn policy_tags_round_trip() {
        for t in PermissionPolicy::TAGS {
            assert_eq!(PermissionPolicy::from_tag(t).unwrap().tag(), *t);
        }
        assert_eq!(PermissionPolicy::from_tag("yolo"), None);
        assert_eq!(PermissionPolicy::default(), PermissionPolicy::Reject);
        for t in PermissionFallback::TAGS {
            assert_eq!(PermissionFallback::from_tag(t).unwrap().tag(), *t);
        }
        assert_eq!(
            PermissionFallback::from_tag("allow"),
            None,
            "no allow fallback"
        );
    }

    /// A delegator can narrow the operator's bound, never widen it: min() of the two.
    #[test]
    fn policies_are_ordered_by_what_runs_unasked() {
        use PermissionPolicy::{Allow, Ask, Reject};
        assert!(Reject < Ask && Ask < Allow);
        assert_eq!(Allow.min(Ask), Ask);
        assert_eq!(Ask.min(Reject), Reject);
        assert!(!Ask.may_run_unasked() && !Reject.may_run_unasked() && Allow.may_run_unasked());
    }

    #[test]
    fn approval_is_checked() {
        let mut c = SessionConfig::new("/w", "p", 1);
        c.mcp_servers.push(hub_server());
        c.approval.hub_server = Some("agent-hub".into());
        c.validate().unwrap();
        c.approval.hub_server = Some("agent-hub-000000000000".into());
        assert!(c.validate().unwrap_err().to_string().contains("not among"));
        c.approval.hub_server = None;
        for (n, ok) in [
            (0, false),
            (1, true),
            (MAX_OPEN_REQUESTS, true),
            (MAX_OPEN_REQUESTS + 1, false),
        ] {
            c.approval.max_open_requests = n;
            assert_eq!(c.validate().is_ok(), ok, "{n}");
        }
        c.approval.max_open_requests = 1;
        let rule = super::super::permission::AllowRule::new(&["read"], None).unwrap();
        c.approval.allow_rules = vec![rule; super::super::permission::MAX_ALLOW_RULES + 1];
        assert_eq!(
            c.validate(),
            Err(SessionConfigError::AllowRules(
                super::super::permission::MAX_ALLOW_RULES + 1
            ))
        );
    }
}
