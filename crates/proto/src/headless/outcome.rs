//! A headless run's one outcome (docs/delegation.md "Headless tasks"): the run's `Ending`,
//! what was captured of stdout and the stderr tail become the `acp::Outcome` the task book
//! settles, exactly as an ACP session's would.
//!
//! Owns the mapping: exit 0 with a result the parser recognises is `completed` (its stop
//! reason, `end_turn` when the format has none); a non-zero exit, an error the agent reported,
//! or output the parser cannot read is `failed` with a reason that quotes the agent's error
//! and a bounded, redacted stderr excerpt; our cancel is `cancelled`, the deadline
//! `timed_out`. Refuses IO.

use super::parse::{self, Format, Parsed};
use super::run::{Cause, Ending};
use crate::acp::sanitize::Secrets;
use crate::acp::{CancelEnd, Failure, Outcome, Progress, Status, StopReason, TurnMeter};

/// Characters of stderr quoted in a failure reason.
pub const STDERR_EXCERPT_CHARS: usize = 300;
/// Last stderr lines quoted in a failure reason.
pub const STDERR_EXCERPT_LINES: usize = 5;

/// What the runner read of the agent's stdout.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Captured {
    /// At most the stdout cap.
    pub bytes: Vec<u8>,
    /// Every byte the agent wrote to stdout, kept or not.
    pub total_bytes: u64,
    /// Bytes were dropped past the cap.
    pub truncated: bool,
    /// The cap (`tasks.headless_stdout_max_bytes`), for the reason.
    pub cap_bytes: u64,
}

/// The manifest tag of `format`, for reasons.
pub fn format_tag(format: Format) -> &'static str {
    match format {
        Format::ExitCode => "exit-code",
        Format::ClaudeJson => "claude-json",
        Format::CodexJsonl => "codex-jsonl",
        Format::GeminiJson => "gemini-json",
        Format::OpencodeJsonl => "opencode-jsonl",
    }
}

/// The outcome of the run. `stderr_tail` holds the last stderr lines, already sanitized.
pub fn build(
    ending: &Ending,
    stdout: &Captured,
    stderr_tail: &[String],
    format: Format,
    max_text_bytes: usize,
    secrets: &Secrets,
) -> Outcome {
    let parsed = parse::parse(format, &stdout.bytes, max_text_bytes, secrets);
    let status = status(ending, stdout, stderr_tail, format, &parsed, secrets);
    Outcome {
        status,
        truncated: parsed.text_truncated || stdout.truncated,
        text: parsed.text,
        meter: Box::new(TurnMeter::headless(parsed.usage, parsed.cost.clone())),
        progress: Progress {
            elapsed_ms: ending.elapsed_ms,
            cost: parsed.cost,
            malformed_lines: u32::try_from(parsed.malformed).unwrap_or(u32::MAX),
            ..Progress::default()
        },
        // One run, one turn: a headless task takes no follow-ups (issue 38 design §2).
        turn: 1,
        kept: false,
    }
}

fn status(
    ending: &Ending,
    stdout: &Captured,
    stderr_tail: &[String],
    format: Format,
    parsed: &Parsed,
    secrets: &Secrets,
) -> Status {
    let exit = ending.exit;
    match ending.cause {
        Some(Cause::Caller) => {
            return Status::Cancelled {
                end: CancelEnd::Exited(Some(exit)),
            }
        }
        Some(Cause::Deadline) => {
            return Status::TimedOut {
                end: CancelEnd::Exited(Some(exit)),
            }
        }
        Some(Cause::OutputClosed) => {
            return Status::Failed(Failure::Headless(format!(
                "agent closed its stdout and did not exit within {} ms; stopped ({exit})",
                ending.limits.eof_exit_wait_ms
            )))
        }
        None => {}
    }
    let stderr = stderr_excerpt(stderr_tail, secrets);
    let with_stderr = |mut why: String| {
        if !stderr.is_empty() {
            why.push_str("; stderr: ");
            why.push_str(&stderr);
        }
        Status::Failed(Failure::Headless(why))
    };
    if exit.code != Some(0) {
        let mut why = format!("agent exited ({exit})");
        if let Some(e) = &parsed.error {
            why.push_str("; it reported: ");
            why.push_str(e);
        }
        return with_stderr(why);
    }
    if let Some(e) = &parsed.error {
        return with_stderr(format!("agent reported an error (exit code 0): {e}"));
    }
    if !parsed.found {
        let mut why = format!(
            "agent exited 0 but its output holds no {} result ({} bytes on stdout",
            format_tag(format),
            stdout.total_bytes
        );
        if stdout.truncated {
            why.push_str(&format!(
                ", cut at {} (tasks.headless_stdout_max_bytes)",
                stdout.cap_bytes
            ));
        }
        why.push(')');
        return with_stderr(why);
    }
    Status::Completed {
        stop_reason: parsed.stop_reason.clone().unwrap_or(StopReason::EndTurn),
    }
}

/// The last few stderr lines, joined, as one bounded excerpt.
fn stderr_excerpt(tail: &[String], secrets: &Secrets) -> String {
    let start = tail.len().saturating_sub(STDERR_EXCERPT_LINES);
    let joined = tail[start..].join(" | ");
    if joined.trim().is_empty() {
        return String::new();
    }
    secrets.excerpt(&joined, STDERR_EXCERPT_CHARS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acp::ExitStatus;
    use crate::headless::run::HeadlessLimits;

    const LIMITS: HeadlessLimits = HeadlessLimits {
        task_timeout_ms: 1000,
        term_grace_ms: 100,
        eof_exit_wait_ms: 100,
    };

    fn ending(cause: Option<Cause>, exit: ExitStatus) -> Ending {
        Ending {
            cause,
            exit,
            stdout_complete: true,
            elapsed_ms: 1234,
            limits: LIMITS,
        }
    }

    fn out(s: &str) -> Captured {
        Captured {
            bytes: s.as_bytes().to_vec(),
            total_bytes: s.len() as u64,
            truncated: false,
            cap_bytes: 1 << 20,
        }
    }

    fn secrets() -> Secrets {
        Secrets::new(["sk-live-SECRETSECRET".to_owned()])
    }

    const CLAUDE: &str = r#"{"type":"result","subtype":"success","is_error":false,"result":"All green.","stop_reason":"end_turn","total_cost_usd":0.5,"usage":{"input_tokens":10,"output_tokens":2}}"#;

    #[test]
    fn exit_zero_with_a_result_completes_with_text_usage_and_cost() {
        let o = build(
            &ending(None, ExitStatus::code(0)),
            &out(CLAUDE),
            &[],
            Format::ClaudeJson,
            1024,
            &secrets(),
        );
        assert_eq!(
            o.status,
            Status::Completed {
                stop_reason: StopReason::EndTurn
            }
        );
        assert_eq!(o.text, "All green.");
        assert!(!o.truncated);
        assert_eq!(o.meter.tokens.unwrap().value.output_tokens, Some(2));
        assert_eq!(o.progress.cost.unwrap().amount, 0.5);
        assert_eq!(o.progress.elapsed_ms, 1234);
    }

    #[test]
    fn a_non_zero_exit_fails_with_the_agents_error_and_a_redacted_stderr_excerpt() {
        let tail: Vec<String> = (0..8)
            .map(|i| format!("line {i}"))
            .chain(["auth failed for key sk-live-SECRETSECRET".to_owned()])
            .collect();
        let err = r#"{"type":"result","subtype":"error_during_execution","is_error":true,"result":"Invalid API key"}"#;
        let o = build(
            &ending(None, ExitStatus::code(1)),
            &out(err),
            &tail,
            Format::ClaudeJson,
            1024,
            &secrets(),
        );
        let why = o.status.to_string();
        assert_eq!(
            why,
            "failed: agent exited (exit code 1); it reported: Invalid API key; stderr: line 4 | line 5 | line 6 | line 7 | auth failed for key [redacted]"
        );
        let o = build(
            &ending(None, ExitStatus::signal(11)),
            &out(""),
            &["x".repeat(10_000)],
            Format::ExitCode,
            1024,
            &secrets(),
        );
        let why = o.status.to_string();
        assert!(
            why.starts_with("failed: agent exited (signal 11); stderr: xxx"),
            "{why}"
        );
        assert!(why.chars().count() < 400, "bounded: {}", why.len());
    }

    #[test]
    fn exit_zero_without_a_result_fails_saying_what_was_missing() {
        let mut c = out("not json at all");
        c.truncated = true;
        c.total_bytes = 5_000_000;
        c.cap_bytes = 4096;
        let o = build(
            &ending(None, ExitStatus::code(0)),
            &c,
            &[],
            Format::GeminiJson,
            1024,
            &secrets(),
        );
        assert_eq!(
            o.status.to_string(),
            "failed: agent exited 0 but its output holds no gemini-json result (5000000 bytes on stdout, cut at 4096 (tasks.headless_stdout_max_bytes))"
        );
        assert!(o.truncated);
        // An error reported in the output with exit 0 is a failure too.
        let o = build(
            &ending(None, ExitStatus::code(0)),
            &out(r#"{"error":{"message":"quota exceeded"}}"#),
            &[],
            Format::GeminiJson,
            1024,
            &secrets(),
        );
        assert_eq!(
            o.status.to_string(),
            "failed: agent reported an error (exit code 0): quota exceeded"
        );
    }

    #[test]
    fn our_stops_are_cancelled_timed_out_or_failed() {
        let run = |cause| {
            build(
                &ending(Some(cause), ExitStatus::signal(15)),
                &out(CLAUDE),
                &[],
                Format::ClaudeJson,
                1024,
                &secrets(),
            )
            .status
        };
        assert_eq!(
            run(Cause::Caller).to_string(),
            "cancelled: the agent exited (signal 15)"
        );
        assert_eq!(
            run(Cause::Deadline).to_string(),
            "timed out: the agent exited (signal 15)"
        );
        assert_eq!(
            run(Cause::OutputClosed).to_string(),
            "failed: agent closed its stdout and did not exit within 100 ms; stopped (signal 15)"
        );
    }
}
