//! How a session ends (docs/acp.md "Outcomes"): exactly one `Outcome` per session, its status
//! (completed, cancelled, timed out, refused, failed) and the report every status carries
//! (the agent's text, bounded; the turn's usage figures (`usage::TurnMeter`); tool-call and
//! permission counts). Every string in a status is already a sanitized, bounded excerpt.

use super::progress::Progress;
use super::usage::TurnMeter;
use std::fmt;

/// The `stopReason` of a `session/prompt` result (§1.5). An unknown value is kept (as a
/// bounded excerpt), not refused: new ones are expected (§1.12).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    EndTurn,
    MaxTokens,
    MaxTurnRequests,
    Refusal,
    Cancelled,
    Other(String),
}

impl StopReason {
    /// `raw` must already be an excerpt when it is not one of the known tags.
    pub fn parse(raw: &str, excerpt: impl FnOnce(&str) -> String) -> StopReason {
        match raw {
            "end_turn" => StopReason::EndTurn,
            "max_tokens" => StopReason::MaxTokens,
            "max_turn_requests" => StopReason::MaxTurnRequests,
            "refusal" => StopReason::Refusal,
            "cancelled" => StopReason::Cancelled,
            other => StopReason::Other(excerpt(other)),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            StopReason::EndTurn => "end_turn",
            StopReason::MaxTokens => "max_tokens",
            StopReason::MaxTurnRequests => "max_turn_requests",
            StopReason::Refusal => "refusal",
            StopReason::Cancelled => "cancelled",
            StopReason::Other(s) => s,
        }
    }
}

/// How the process ended, as the IO layer saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExitStatus {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl ExitStatus {
    pub fn code(code: i32) -> ExitStatus {
        ExitStatus {
            code: Some(code),
            signal: None,
        }
    }

    pub fn signal(signal: i32) -> ExitStatus {
        ExitStatus {
            code: None,
            signal: Some(signal),
        }
    }
}

impl From<std::process::ExitStatus> for ExitStatus {
    fn from(s: std::process::ExitStatus) -> ExitStatus {
        use std::os::unix::process::ExitStatusExt;
        ExitStatus {
            code: s.code(),
            signal: s.signal(),
        }
    }
}

impl fmt::Display for ExitStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.code, self.signal) {
            (Some(c), _) => write!(f, "exit code {c}"),
            (None, Some(s)) => write!(f, "signal {s}"),
            (None, None) => write!(f, "unknown status"),
        }
    }
}

/// How the agent reacted to our `session/cancel` (or why none was sent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CancelEnd {
    /// The prompt had not been sent yet: nothing ran, no `session/cancel` was needed.
    BeforePrompt,
    /// The prompt resolved after the cancel, with this stop reason (usually `cancelled`; the
    /// example agent says `end_turn` when the cancel lands during a permission prompt, §5.1).
    Stopped(StopReason),
    /// The prompt resolved with a JSON-RPC error after the cancel (-32800 is the polite one).
    Errored { code: i64, message: String },
    /// The agent gave no answer within `cancel_grace_ms`.
    NoAnswer { waited_ms: u64 },
    /// The agent exited or closed its output before answering.
    Exited(Option<ExitStatus>),
    /// The agent broke the protocol (garbage) before answering.
    Garbage,
}

impl fmt::Display for CancelEnd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CancelEnd::BeforePrompt => write!(f, "before the prompt was sent"),
            CancelEnd::Stopped(r) => write!(f, "the agent stopped with {}", r.as_str()),
            CancelEnd::Errored { code, message } => {
                write!(f, "the prompt ended with error {code}: {message}")
            }
            CancelEnd::NoAnswer { waited_ms } => {
                write!(
                    f,
                    "the agent did not answer the cancel within {waited_ms} ms"
                )
            }
            CancelEnd::Exited(Some(s)) => write!(f, "the agent exited ({s})"),
            CancelEnd::Exited(None) => write!(f, "the agent closed its output"),
            CancelEnd::Garbage => write!(f, "the agent broke the protocol"),
        }
    }
}

/// Which of our requests a failure concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Initialize,
    SessionNew,
    /// Putting the session in the mode where the agent asks (docs/acp.md "Session modes").
    SetMode,
    SetConfigOption,
    Prompt,
}

impl Step {
    pub fn method(self) -> &'static str {
        match self {
            Step::Initialize => "initialize",
            Step::SessionNew => "session/new",
            Step::SetMode => "session/set_mode",
            Step::SetConfigOption => "session/set_config_option",
            Step::Prompt => "session/prompt",
        }
    }
}

/// The agent could not take the task at all; nothing ran.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `session/new` answered -32000 (§1.8). We never log in for the user (§1.9 step 3); the
    /// methods the agent offered are listed so the operator knows what to do.
    NotLoggedIn {
        message: String,
        auth_methods: Vec<String>,
    },
    /// `initialize` answered a protocol version we do not speak (we speak 1, §1.1).
    UnsupportedProtocol { version: String },
    /// The task itself was refused before any agent was started (its session config did not
    /// validate, or the runner's own checks failed); the reason never holds the prompt.
    Invalid(String),
    /// The session could not be put in a mode where the agent asks the hub before it acts,
    /// and the policy is not an explicit `allow` (docs/acp.md "Session modes"). Nothing was
    /// prompted.
    Unasked { why: String, policy: &'static str },
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::NotLoggedIn {
                message,
                auth_methods,
            } => {
                write!(f, "agent not logged in ({message})")?;
                if !auth_methods.is_empty() {
                    write!(f, "; it offers: {}", auth_methods.join(", "))?;
                }
                write!(f, "; log in to the agent yourself, the hub never does")
            }
            Refusal::UnsupportedProtocol { version } => write!(
                f,
                "agent speaks ACP protocol version {version}; the hub speaks 1"
            ),
            Refusal::Invalid(why) => write!(f, "the task is invalid: {why}"),
            Refusal::Unasked { why, policy } => write!(
                f,
                "the agent cannot be put in a mode where it asks the hub before acting ({why}); \
                 under permission = \"{policy}\" the hub does not run an agent that would not ask. \
                 Name the agent's asking mode in its manifest (run.ask_modes), or set its \
                 permission to \"allow\" (tasks.agent_permission) to run it unasked"
            ),
        }
    }
}

/// The session failed. `Display` is the reason reported to the delegator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// One of our requests got a JSON-RPC error.
    Rpc {
        step: Step,
        code: i64,
        message: String,
    },
    /// One of our requests got no answer within its deadline.
    NoAnswer { step: Step, waited_ms: u64 },
    /// A result that lacks what it must carry (`protocolVersion`, `sessionId`, `stopReason`).
    BadResult { step: Step, what: &'static str },
    /// More malformed lines than `max_malformed_lines`, or a line over `max_line_bytes`, or
    /// more requests than `max_agent_requests`.
    Garbage(String),
    /// The agent exited (or closed its output: status `None`) before the prompt's result.
    Exited {
        during: Step,
        status: Option<ExitStatus>,
    },
    /// The runner could not start the agent process (or the thread driving it); nothing ran.
    Spawn(String),
    /// A headless run (no ACP, docs/delegation.md "Headless tasks") failed: the agent exited
    /// non-zero, reported an error in its output, or wrote nothing its `run.outcome` parser
    /// reads. The reason is already a bounded, sanitized text (`headless::outcome`).
    Headless(String),
    /// Mid-turn the agent left the mode where it asks the hub and could not be kept in one
    /// (it offers none, or left again after `MAX_MODE_RESETS` switches back), so its turn was
    /// cancelled rather than run unasked (docs/acp.md "Session modes"); `end` says how the
    /// agent took the cancel.
    LeftAskingMode { mode: String, end: CancelEnd },
    /// A follow-up turn (issue 38 design §2) was never sent to the agent: the turn it
    /// interrupted did not end in a way that leaves the session usable, or the session had
    /// already closed.
    FollowUpNotSent(String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Rpc {
                step,
                code,
                message,
            } => write!(
                f,
                "agent answered {} with error {code}: {message}",
                step.method()
            ),
            Failure::NoAnswer { step, waited_ms } => write!(
                f,
                "agent did not answer {} within {waited_ms} ms",
                step.method()
            ),
            Failure::BadResult { step, what } => {
                write!(f, "agent's {} result is invalid: {what}", step.method())
            }
            Failure::Garbage(why) => write!(f, "agent spoke garbage: {why}"),
            Failure::Exited {
                during,
                status: Some(s),
            } => write!(
                f,
                "agent exited ({s}) while waiting for {}",
                during.method()
            ),
            Failure::Exited {
                during,
                status: None,
            } => write!(
                f,
                "agent closed its output while waiting for {}",
                during.method()
            ),
            Failure::Spawn(why) => write!(f, "could not start the agent: {why}"),
            Failure::Headless(why) => f.write_str(why),
            Failure::LeftAskingMode { mode, end } => write!(
                f,
                "the agent moved to mode {mode}, where it does not ask the hub before acting, \
                 and could not be kept in a mode that asks; its turn was cancelled ({end})"
            ),
            Failure::FollowUpNotSent(why) => {
                write!(f, "the follow-up was not sent to the agent: {why}")
            }
        }
    }
}

/// The status half of an `Outcome`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Status {
    /// The prompt resolved with a stop reason and no cancel was asked for. `refusal`,
    /// `max_tokens` and unknown reasons are completions too: the agent ended its turn.
    Completed {
        stop_reason: StopReason,
    },
    /// The caller called `cancel` before the prompt resolved. Whatever the agent answered
    /// after that, the outcome is `Cancelled` (docs/acp.md "Cancel racing completion").
    Cancelled {
        end: CancelEnd,
    },
    /// The task's deadline passed first; `end` says how the agent took the cancel.
    TimedOut {
        end: CancelEnd,
    },
    Refused(Refusal),
    Failed(Failure),
}

impl Status {
    /// The outcome's name in envelopes and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Status::Completed { .. } => "completed",
            Status::Cancelled { .. } => "cancelled",
            Status::TimedOut { .. } => "timed_out",
            Status::Refused(_) => "refused",
            Status::Failed(_) => "failed",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Status::Completed { stop_reason } => write!(f, "completed ({})", stop_reason.as_str()),
            Status::Cancelled { end } => write!(f, "cancelled: {end}"),
            Status::TimedOut { end } => write!(f, "timed out: {end}"),
            Status::Refused(r) => write!(f, "refused: {r}"),
            Status::Failed(why) => write!(f, "failed: {why}"),
        }
    }
}

/// The one final event of a session.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub status: Status,
    /// The agent's text for this turn, at most `max_text_bytes`, cut on a char boundary.
    pub text: String,
    /// True when text was dropped to respect the cap.
    pub truncated: bool,
    /// The turn's figures, each tagged with its source (tokens from the prompt result,
    /// cost and context from the run's latest `usage_update`, or a headless parser's; issue
    /// 38 design §1). Absent ones are absent, never 0.
    /// Boxed: the figures would make every session event as large as an outcome.
    pub meter: Box<TurnMeter>,
    /// The last progress snapshot (tool calls, plan, context usage, cost, counts).
    pub progress: Progress,
    /// The turn this outcome ends, from 1 (issue 38 design §2: one outcome per turn).
    pub turn: u32,
    /// The session stays open for a follow-up (`Event::Idle` follows); false: it closes.
    pub kept: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_reasons_round_trip_and_unknowns_are_kept() {
        for s in [
            "end_turn",
            "max_tokens",
            "max_turn_requests",
            "refusal",
            "cancelled",
        ] {
            assert_eq!(StopReason::parse(s, |x| x.to_owned()).as_str(), s);
        }
        let r = StopReason::parse("paused_for_coffee", |x| x.to_owned());
        assert_eq!(r, StopReason::Other("paused_for_coffee".into()));
    }

    #[test]
    fn reasons_read_well() {
        let r = Refusal::NotLoggedIn {
            message: "Authentication required".into(),
            auth_methods: vec!["chatgpt".into(), "codex-api-key (env CODEX_API_KEY)".into()],
        };
        assert_eq!(
            r.to_string(),
            "agent not logged in (Authentication required); it offers: chatgpt, codex-api-key (env CODEX_API_KEY); log in to the agent yourself, the hub never does"
        );
        let f = Failure::Exited {
            during: Step::Prompt,
            status: Some(ExitStatus::code(3)),
        };
        assert_eq!(
            f.to_string(),
            "agent exited (exit code 3) while waiting for session/prompt"
        );
        assert_eq!(Status::Failed(f).name(), "failed");
        assert_eq!(
            Status::TimedOut {
                end: CancelEnd::NoAnswer { waited_ms: 5 }
            }
            .to_string(),
            "timed out: the agent did not answer the cancel within 5 ms"
        );
    }
}
