//! `agent-hub hook …` and `agent-hub drain`: delivery into running agents (crates/cli/src/deliver,
//! docs/delivery.md). `hook stop` always exits 0 and writes only a block decision to stdout,
//! since it runs inside an agent's turn; `drain` exits 2 with nothing printed when no mail
//! waits. The argument types and the glue only: the rules are `crate::deliver`'s.

use super::{warn_unconfirmed, AppError, Cli, Command, Identity};
use crate::deliver;
use clap::{Args, Parser, Subcommand};
use std::io::Read;
use std::process::ExitCode;

#[derive(Subcommand)]
pub(super) enum HookCommand {
    /// Read the Stop/AfterAgent hook's JSON on stdin; if mail waits, print
    /// {"decision":"block","reason":…} with it, then ack it.
    Stop {
        #[command(flatten)]
        id: Identity,
        /// Blocks in a row (stop_hook_active chains) after which the agent may stop anyway.
        #[arg(long, value_name = "N", default_value_t = deliver::DEFAULT_MAX_BLOCKS)]
        max_blocks: u32,
        #[command(flatten)]
        limits: DeliverLimits,
    },
    /// Tell the hub a turn started (Claude Code `UserPromptSubmit`, Gemini CLI `BeforeAgent`):
    /// `who` shows busy. Prints nothing; always exits 0 (docs/delivery.md "Liveness").
    TurnStart(TurnArgs),
    /// Tell the hub a turn ended: `who` shows idle. (`hook stop` reports this itself.)
    TurnEnd(TurnArgs),
    /// Tell the hub the agent's session ended (`SessionEnd`): `who` shows gone.
    SessionEnd(TurnArgs),
}

#[derive(Args)]
pub(super) struct TurnArgs {
    #[command(flatten)]
    id: Identity,
    /// The agent's process id, for a caller that knows it (a plugin inside the agent);
    /// without it the hook's nearest ancestor that is a known agent CLI is used.
    #[arg(long, value_name = "PID")]
    pid: Option<u32>,
}

#[derive(Args)]
pub(super) struct DeliverLimits {
    /// Envelopes taken per run at most; the rest stay queued.
    #[arg(long, value_name = "N", default_value_t = deliver::DEFAULT_MAX_MESSAGES)]
    max_messages: usize,
    /// Bytes of rendered mail per run, about; the first message is always shown.
    #[arg(long, value_name = "BYTES", default_value_t = deliver::DEFAULT_MAX_BYTES)]
    max_bytes: usize,
}

impl DeliverLimits {
    fn get(&self) -> deliver::run::Limits {
        deliver::run::Limits {
            max_messages: self.max_messages,
            max_bytes: self.max_bytes,
        }
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(super) enum DrainFormatArg {
    Text,
    Json,
}

fn identity(id: Identity) -> deliver::run::Identity {
    deliver::run::Identity {
        name: id.name,
        token_file: id.token_file,
        port: id.port,
    }
}

/// `agent-hub hook …`: exit 0 whatever happens, stdout written only with a decision. Usage
/// errors and panics go to the hook log under the state directory, never to stdout or
/// stderr, which some agents show to the model or the user.
pub(super) fn hook_main() -> ExitCode {
    let dir = deliver::state::state_dir_from_env();
    let log = deliver::state::HookLog::new(dir.as_deref());
    let panic_log = log.clone();
    std::panic::set_hook(Box::new(move |info| {
        panic_log.line(&format!("panic: {info}"));
    }));
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
            } else {
                log.line(&format!("usage error: {}", e.render()));
            }
            return ExitCode::SUCCESS;
        }
    };
    let Command::Hook { hook } = cli.command else {
        return ExitCode::SUCCESS;
    };
    // Invariant: the outcome is always exit 0; a panic is logged by the hook above.
    let _ = std::panic::catch_unwind(move || run_hook(hook));
    ExitCode::SUCCESS
}

pub(super) fn run_hook(hook: HookCommand) -> ExitCode {
    let dir = deliver::state::state_dir_from_env();
    let log = deliver::state::HookLog::new(dir.as_deref());
    match hook {
        HookCommand::Stop {
            id,
            max_blocks,
            limits,
        } => {
            let opts = deliver::run::HookStopOptions {
                identity: identity(id),
                limits: limits.get(),
                max_blocks,
            };
            let input = read_hook_stdin();
            let mut out = std::io::stdout().lock();
            let outcome = deliver::run::hook_stop(&opts, &input, &mut out, dir.as_deref(), &log);
            drop(out);
            log.line(&outcome.to_string());
            // A block hands the agent its mail as the next input: the turn goes on.
            let state = match &outcome {
                deliver::run::HookOutcome::NotAStop(_) => None,
                deliver::run::HookOutcome::Blocked { .. } => Some("busy"),
                _ => Some("idle"),
            };
            if let Some(state) = state {
                deliver::turn::report(&opts.identity, state, None, &log);
            }
        }
        HookCommand::TurnStart(a) => turn_hook(a, "busy", &log),
        HookCommand::TurnEnd(a) => turn_hook(a, "idle", &log),
        HookCommand::SessionEnd(a) => turn_hook(a, "gone", &log),
    }
    ExitCode::SUCCESS
}

/// A turn report: the hook's input is read (boundedly, and ignored) so the agent's write never
/// meets a closed pipe; stdout stays empty (a `UserPromptSubmit` hook's stdout reaches the
/// model).
fn turn_hook(a: TurnArgs, state: &str, log: &deliver::state::HookLog) {
    deliver::turn::drain_stdin();
    deliver::turn::report(&identity(a.id), state, a.pid, log);
}

/// The hook's stdin, bounded; a terminal (someone running the hook by hand) counts as empty.
fn read_hook_stdin() -> Vec<u8> {
    // SAFETY: isatty only inspects the descriptor.
    if unsafe { libc::isatty(0) } == 1 {
        return Vec::new();
    }
    let mut buf = Vec::new();
    let _ = std::io::stdin()
        .lock()
        .take(deliver::run::MAX_HOOK_INPUT_BYTES)
        .read_to_end(&mut buf);
    buf
}

pub(super) fn run_drain(
    id: Identity,
    format: DrainFormatArg,
    confirm: bool,
    limits: DeliverLimits,
) -> Result<ExitCode, AppError> {
    let opts = deliver::run::DrainOptions {
        identity: identity(id),
        limits: limits.get(),
        format: match format {
            DrainFormatArg::Text => deliver::run::DrainFormat::Text,
            DrainFormatArg::Json => deliver::run::DrainFormat::Json,
        },
    };
    let dir = deliver::state::state_dir_from_env();
    let mut out = std::io::stdout().lock();
    let mut confirmed = || {
        close_stdout();
        read_confirmation(deliver::run::CONFIRM_TIMEOUT)
    };
    let confirm_fn: Option<&mut dyn FnMut() -> bool> =
        if confirm { Some(&mut confirmed) } else { None };
    match deliver::run::drain(&opts, &mut out, dir.as_deref(), confirm_fn)? {
        deliver::run::DrainOutcome::NoMail { notes } => {
            for n in notes {
                eprintln!("agent-hub: note: {n}");
            }
            Ok(ExitCode::from(2))
        }
        deliver::run::DrainOutcome::Printed {
            unconfirmed, notes, ..
        } => {
            for u in unconfirmed {
                warn_unconfirmed(&u);
            }
            for n in notes {
                eprintln!("agent-hub: note: {n}");
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Ends stdout (its text is already flushed) so the reader sees end-of-file and knows the
/// mail is complete, while this process waits for its confirmation.
fn close_stdout() {
    // SAFETY: dup2 onto fd 1 replaces the descriptor atomically; /dev/null is opened and the
    // temporary descriptor closed here. Nothing else writes to stdout afterwards.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if null >= 0 {
            libc::dup2(null, 1);
            libc::close(null);
        } else {
            libc::close(1);
        }
    }
}

/// True when the line `ok` arrives on stdin within `timeout`.
fn read_confirmation(timeout: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    let mut line = Vec::new();
    let mut stdin = std::io::stdin().lock();
    loop {
        if !crate::client::stdin::readable_by(deadline) {
            return false;
        }
        let mut buf = [0u8; 64];
        match stdin.read(&mut buf) {
            Ok(0) | Err(_) => return false,
            Ok(k) => {
                line.extend_from_slice(&buf[..k]);
                if let Some(pos) = line.iter().position(|&b| b == b'\n') {
                    return line[..pos].trim_ascii() == b"ok";
                }
                if line.len() > 64 {
                    return false;
                }
            }
        }
    }
}
