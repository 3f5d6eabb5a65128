//! `AppError`: every way an `agent-hub` verb fails, kept typed from the layer that failed up
//! to the program's edge, and `AppError::report`, the one place that turns it into the text
//! on stderr and the exit code (SPEC §9.5; the README's exit-code table; PLAN.md §14 habit 6,
//! "Binaries map errors to the documented exit codes").
//!
//! Owns the wording the client adds to a lower layer's error (`--body is not JSON: …`,
//! `cannot write to stdout: …`) and the `agent-hub: ` prefix. Refuses: every outcome that is
//! not a failure, though it has an exit code of its own (an await that timed out, 2; a task
//! that ended other than `completed`, 3; `status --wait-for`'s 2 and 3; `top --once` that
//! could not reach the hub, 1 after its own lines): the verbs return those as `ExitCode`s.
//! The `hook` verbs never come here: a hook must never break its agent, so it logs its
//! errors and exits 0 (`hook::hook_main`).

use crate::client::task_view::DelegateInputError;
use crate::client::top::TopError;
use crate::client::ClientError;
use crate::deliver::run::{DeliverError, NudgeError};
use crate::mcp::ServeError;
use agent_hub_host::agents::identity::IdentityError;
use agent_hub_host::token_file::TokenFileError;
use agent_hub_proto::wire::approval::AnswerError;
use std::fmt;
use std::process::ExitCode;

use super::agents::EnvError;

/// Exit code of every failure: nothing was queued or consumed (module doc of `app`).
const FAILURE: u8 = 1;

/// Why a verb failed. Every variant means exit 1; its `Display` is the text after
/// `agent-hub: `.
#[derive(Debug)]
pub enum AppError {
    /// The command line did not parse (clap's own error, rendered as clap renders it). Help
    /// and version come this way too, as clap reports them, and are no failure.
    Args(clap::Error),
    /// `top --interval` outside 0.2 to 3600 seconds.
    Interval(f64),
    /// The token file is missing, unreadable, too open or empty.
    Token(TokenFileError),
    /// `send --body` is not JSON.
    Body(serde_json::Error),
    /// `send --body -`: stdin could not be read.
    Stdin(std::io::Error),
    /// A verb's answer could not be written to stdout.
    Stdout(std::io::Error),
    /// `await --no-ack`: the envelope was taken (consumed) but could not be printed.
    Unprinted(std::io::Error),
    /// `status`: the hub's answer could not be written back as JSON.
    Encode(serde_json::Error),
    /// `delegate`: `--prompt`, `--cwd` or `--allow` refused before anything was sent.
    Delegate(DelegateInputError),
    /// `task answer`: an argument the wire refuses (empty, too long, a control character),
    /// found before anything was sent.
    Answer(AnswerError),
    /// `task cancel`: the hub knows no such task of the asker's (the state, `unknown`, is
    /// printed first). The task id as given.
    NoSuchTask(String),
    /// The hub, the connection, or what answered on the port.
    Client(ClientError),
    /// `top`: the terminal failed, or the hub refused the view for good.
    Top(TopError),
    /// `drain`.
    Drain(DeliverError),
    /// `nudge`.
    Nudge(NudgeError),
    /// `mcp`: stdin or stdout failed.
    Mcp(ServeError),
    /// `agents`, `install`, `uninstall`: `$HOME` or the hub config of `--config`.
    Env(EnvError),
    /// `install`: the identities cannot be worked out.
    Identity(IdentityError),
}

impl AppError {
    /// The program's edge: prints the error on stderr after `agent-hub: ` and returns the
    /// exit code. clap's help and version go to stdout with exit 0, as clap prints them.
    pub fn report(self) -> ExitCode {
        if let AppError::Args(e) = &self {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            // clap's text ends with its own newline (and may span lines: usage, a hint).
            eprint!("agent-hub: {self}");
        } else {
            eprintln!("agent-hub: {self}");
        }
        ExitCode::from(FAILURE)
    }
}

impl fmt::Display for AppError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AppError::Args(e) => {
                let text = e.render().to_string();
                f.write_str(text.strip_prefix("error: ").unwrap_or(&text))
            }
            AppError::Interval(secs) => write!(
                f,
                "--interval must be between 0.2 and 3600 seconds, not {secs}"
            ),
            AppError::Token(e) => write!(f, "{e}"),
            AppError::Body(e) => write!(f, "--body is not JSON: {e}"),
            AppError::Stdin(e) => write!(f, "cannot read the body from stdin: {e}"),
            AppError::Stdout(e) => write!(f, "cannot write to stdout: {e}"),
            AppError::Unprinted(e) => write!(
                f,
                "the envelope was received but could not be written to stdout: {e}"
            ),
            AppError::Encode(e) => write!(f, "{e}"),
            AppError::Delegate(e) => write!(f, "{e}"),
            AppError::Answer(e) => write!(f, "task answer: {e}"),
            AppError::NoSuchTask(task) => write!(
                f,
                "no task {} of yours is known to the hub",
                agent_hub_proto::kernel::text::for_terminal(task)
            ),
            AppError::Client(e) => write!(f, "{e}"),
            AppError::Top(e) => write!(f, "{e}"),
            AppError::Drain(e) => write!(f, "{e}"),
            AppError::Nudge(e) => write!(f, "{e}"),
            AppError::Mcp(e) => write!(f, "{e}"),
            AppError::Env(e) => write!(f, "{e}"),
            AppError::Identity(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for AppError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AppError::Args(e) => Some(e),
            AppError::Interval(_) | AppError::NoSuchTask(_) => None,
            AppError::Token(e) => Some(e),
            AppError::Body(e) | AppError::Encode(e) => Some(e),
            AppError::Stdin(e) | AppError::Stdout(e) | AppError::Unprinted(e) => Some(e),
            AppError::Delegate(e) => Some(e),
            AppError::Answer(e) => Some(e),
            AppError::Client(e) => Some(e),
            AppError::Top(e) => Some(e),
            AppError::Drain(e) => Some(e),
            AppError::Nudge(e) => Some(e),
            AppError::Mcp(e) => Some(e),
            AppError::Env(e) => Some(e),
            AppError::Identity(e) => Some(e),
        }
    }
}

/// `?` for the errors that mean one thing wherever they arise; the io and JSON errors, which
/// mean several, are named at each place (`AppError::Stdout`, `AppError::Body`, …).
macro_rules! from_layer {
    ($($variant:ident($ty:ty)),* $(,)?) => {$(
        impl From<$ty> for AppError {
            fn from(e: $ty) -> AppError {
                AppError::$variant(e)
            }
        }
    )*};
}

from_layer!(
    Args(clap::Error),
    Token(TokenFileError),
    Delegate(DelegateInputError),
    Client(ClientError),
    Top(TopError),
    Drain(DeliverError),
    Nudge(NudgeError),
    Mcp(ServeError),
    Env(EnvError),
    Identity(IdentityError),
);

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts the client adds are the ones it printed as strings before they were typed
    /// (tests/integration/client_cli.rs and client_errors.rs check them end to end).
    #[test]
    fn the_added_words_are_the_old_texts() {
        let io = || std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        let not_json = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        assert_eq!(
            AppError::Body(not_json).to_string(),
            format!(
                "--body is not JSON: {}",
                serde_json::from_str::<serde_json::Value>("{").unwrap_err()
            )
        );
        assert_eq!(
            AppError::Stdout(io()).to_string(),
            format!("cannot write to stdout: {}", io())
        );
        assert_eq!(
            AppError::Interval(0.1).to_string(),
            "--interval must be between 0.2 and 3600 seconds, not 0.1"
        );
        assert_eq!(
            AppError::NoSuchTask("task-\u{1b}x".into()).to_string(),
            format!(
                "no task {} of yours is known to the hub",
                agent_hub_proto::kernel::text::for_terminal("task-\u{1b}x")
            )
        );
        assert_eq!(
            AppError::from(ClientError::Hub("hub is shutting down".into())).to_string(),
            "hub is shutting down"
        );
    }
}
