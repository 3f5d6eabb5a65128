//! `agent-hub`: the client CLI (SPEC §9): the verbs' arguments and what each prints, one
//! connection per verb (`crate::client`).
//!
//! Exit codes: 0 success; 1 any failure with nothing queued or consumed (usage errors
//! included: every failure is an `AppError`, typed up to `main`, which `AppError::report`
//! alone turns into its text and this code, `error.rs`); 2 an await timed out hub-side (stderr silent); 3 `delegate --wait` saw the task
//! end in a state other than `completed` (docs/delegation.md "Exit codes").
//! `status --wait-for STAGE` (SPEC §12.4 "Waiting for a stage"): 0 the stage was reached, 2
//! `--timeout` passed first, 3 the envelope settled where the stage can no longer come
//! (bounced, lost, consumed without it, or unknown); the status line is printed in each case.
//!
//! Delivery into running agents (`crates/cli/src/deliver`, docs/delivery.md): `hook stop` always exits 0
//! and writes only to stdout, only a block decision, since it runs inside an agent's turn;
//! `drain` exits 2 with nothing printed when no mail waits, like an await that timed out.

use crate::client::{self, Acked, AwaitOutcome, Endpoint};
use crate::deliver;
use agent_hub_proto::wire::{AwaitRequest, Envelope, Reader, WaitEnd, WaitFor};
use clap::{Args, Parser, Subcommand};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

mod agents;
mod error;
mod hook;
pub use error::AppError;
use hook::{hook_main, run_drain, run_hook, DeliverLimits, DrainFormatArg, HookCommand};

#[derive(Parser)]
#[command(
    name = "agent-hub",
    version,
    about = "Send and await envelopes through an agent-hub server"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Args)]
struct Identity {
    /// Agent name to authenticate as.
    #[arg(long = "as", value_name = "NAME")]
    name: String,
    /// File holding this agent's token (mode 600).
    #[arg(long, value_name = "FILE")]
    token_file: PathBuf,
    /// The hub's TCP port on 127.0.0.1.
    #[arg(long)]
    port: u16,
}

#[derive(Subcommand)]
enum Command {
    /// Send one envelope; prints its id.
    Send {
        #[command(flatten)]
        id: Identity,
        /// Destination agent name.
        #[arg(long)]
        to: String,
        /// Envelope kind (task, result, or any other word).
        #[arg(long)]
        kind: String,
        /// JSON body, or - to read it from stdin.
        #[arg(long)]
        body: String,
        /// Id of the envelope this one answers.
        #[arg(long, value_name = "ID")]
        correlation_id: Option<String>,
    },
    /// Wait for one envelope; prints it as one JSON line.
    Await {
        #[command(flatten)]
        id: Identity,
        /// Only an envelope whose correlationId is ID.
        #[arg(long, value_name = "ID")]
        reply_to: Option<String>,
        /// Only an envelope of this kind.
        #[arg(long)]
        kind: Option<String>,
        /// Give up after SECS seconds (hub-side; exit 2). Without it, wait forever.
        #[arg(long, value_name = "SECS")]
        timeout: Option<u64>,
        /// Plain delivery: consumed when the hub writes it, not acknowledged after printing.
        #[arg(long)]
        no_ack: bool,
    },
    /// List every roster agent: its state (waiting, busy, idle, gone, unknown) and since when,
    /// parked awaits and their filters, queued count, last seen, last delivery. Tokens never
    /// appear.
    Who {
        #[command(flatten)]
        id: Identity,
        /// Print the hub's answer as one JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Live view of the hub: agents' state, queues, parked awaits, recent envelopes' metadata,
    /// unfinished tasks and the requests they wait on, relay links. Keys: s sort, r reverse,
    /// a answer a request (then digits; Esc back), q quit. Plain lines, one snapshot per
    /// interval, when stdout is not a terminal.
    #[command(alias = "watch")]
    Top(TopArgs),
    /// Tell where an envelope you sent or received is (its stage, and the kind of reader
    /// that took it); prints one JSON object. With --wait-for, wait for a stage first.
    Status {
        #[command(flatten)]
        id: Identity,
        /// The envelope id.
        #[arg(long = "id", value_name = "ID")]
        envelope_id: String,
        /// Wait until the envelope is delivered, acked or forwarded (hub-side). Exit 0 when
        /// it got there, 2 when --timeout passed first, 3 when it settled where that stage
        /// can no longer come (bounced, lost, consumed without it, unknown).
        #[arg(long, value_name = "STAGE", value_parser = ["delivered", "acked", "forwarded"])]
        wait_for: Option<String>,
        /// With --wait-for: give up after SECS seconds (exit 2). Without it, wait as long as
        /// it takes.
        #[arg(long, value_name = "SECS", requires = "wait_for")]
        timeout: Option<u64>,
    },
    /// Deliver mail from inside an agent's end-of-turn hook (Claude Code and Codex `Stop`,
    /// Gemini CLI `AfterAgent`). Always exits 0; prints a block decision only when there is mail.
    Hook {
        #[command(subcommand)]
        hook: HookCommand,
    },
    /// Print the mail waiting for you without waiting for more, then ack it; for agent plugins
    /// (docs/delivery.md). Exit 2 with nothing printed when there is none.
    Drain {
        #[command(flatten)]
        id: Identity,
        /// text: the rendering a model reads; json: each envelope as one line, as the hub sent it.
        #[arg(long, value_enum, default_value = "text")]
        format: DrainFormatArg,
        /// After printing, close stdout and ack only if the line "ok" then arrives on stdin
        /// (within 20 s): for a plugin that must hand the text over before it is consumed.
        #[arg(long)]
        confirm: bool,
        #[command(flatten)]
        limits: DeliverLimits,
    },
    /// Terminal mode (opt-in, the least safe): type a short mail notice into a tmux pane.
    Nudge {
        /// tmux target pane, e.g. work:1.0 or %3.
        #[arg(long, value_name = "TARGET")]
        pane: String,
        /// The agent whose mail the notice announces.
        #[arg(long = "as", value_name = "NAME")]
        name: String,
        /// Named in the notice's drain command, with --port.
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
        /// Named in the notice's drain command, with --token-file.
        #[arg(long)]
        port: Option<u16>,
        /// Type this instead of the default notice (control characters are stripped, a
        /// leading / or other prompt trigger is neutralised).
        #[arg(long)]
        text: Option<String>,
        /// Press Enter after typing. Without it the notice waits in the prompt.
        #[arg(long)]
        submit: bool,
    },
    /// List the agent CLIs this machine knows (built-in manifests and ~/.agent-hub/agents),
    /// installed or not; `agents ps` lists their running processes (docs/agents.md).
    Agents(AgentsArgs),
    /// Register the hub's MCP server and delivery hook or plugin in agents' user-scope
    /// configs, and place the agent-hub skills where the agent has a skills folder (a backup
    /// of each changed file is kept; docs/agents.md).
    Install(InstallArgs),
    /// Remove exactly the entries and files `install` adds (an edited skill stays).
    Uninstall(AgentSelection),
    /// Hand a prompt to an agent the hub runs (docs/delegation.md); prints the task id. The
    /// outcome arrives as a `task_outcome` envelope correlated to it:
    /// `agent-hub await --reply-to TASK --kind task_outcome`.
    Delegate(DelegateArgs),
    /// The tasks you delegated: `status`, `list`, `cancel`, and `answer` for a request one of
    /// them waits on.
    Task {
        #[command(subcommand)]
        task: TaskCommand,
    },
    // Its help names the tools from the one list `tools/list` is held to.
    #[command(about = mcp_about())]
    Mcp {
        #[command(flatten)]
        id: Identity,
    },
}

/// `agent-hub mcp`'s one-line help: every tool `tools/list` gives, in its order.
fn mcp_about() -> String {
    format!(
        "Serve MCP on stdio (tools {}) for agents (docs/mcp.md)",
        crate::mcp::tools::TOOL_NAMES.join(", ")
    )
}

/// The program: parses argv, runs the verb, returns its exit code (above). Its edge: a
/// failure, typed until here, becomes its text and exit code only in `AppError::report`.
pub fn main() -> ExitCode {
    // A hook must never break its agent: `hook` handles even its usage errors itself.
    if std::env::args_os().nth(1).is_some_and(|a| a == "hook") {
        return hook_main();
    }
    match Cli::try_parse().map_err(AppError::Args).and_then(run) {
        Ok(code) => code,
        Err(e) => e.report(),
    }
}

fn endpoint(id: Identity) -> Result<Endpoint, AppError> {
    let token = agent_hub_host::token_file::read(&id.token_file)?;
    Ok(Endpoint {
        name: id.name,
        token,
        port: id.port,
    })
}

fn run(cli: Cli) -> Result<ExitCode, AppError> {
    match cli.command {
        Command::Send {
            id,
            to,
            kind,
            body,
            correlation_id,
        } => {
            let body = if body == "-" {
                let mut s = String::new();
                std::io::stdin()
                    .read_to_string(&mut s)
                    .map_err(AppError::Stdin)?;
                s.trim().to_owned()
            } else {
                body
            };
            let ts = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            let env = Envelope::new(
                uuid::Uuid::new_v4().to_string(),
                id.name.clone(),
                to,
                ts,
                kind,
                correlation_id,
                body,
            )
            .map_err(AppError::Body)?;
            let ep = endpoint(id)?;
            let sent = client::send_reporting(&ep, env)?;
            println!("{}", sent.id);
            // Accepted and queued all the same (SPEC §5.1): exit 0, the warning on stderr, in
            // the hub's words made safe for the terminal.
            if let Some(w) = &sent.warning {
                eprintln!(
                    "agent-hub: warning: {}",
                    agent_hub_proto::kernel::text::for_terminal(w)
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Await {
            id,
            reply_to,
            kind,
            timeout,
            no_ack,
        } => {
            let ep = endpoint(id)?;
            let req = AwaitRequest {
                reply_to,
                kind,
                timeout_secs: timeout,
                ack: None,
                reader: Some(Reader::CliAwait.as_str().to_owned()),
            };
            if no_ack {
                return match client::await_envelope_reporting(&ep, req, warn_forged)? {
                    AwaitOutcome::Envelope(text) => {
                        print_line(&text).map_err(AppError::Unprinted)?;
                        Ok(ExitCode::SUCCESS)
                    }
                    AwaitOutcome::Timeout => Ok(ExitCode::from(2)),
                };
            }
            match client::await_acked_reporting(&ep, req, print_line, warn_forged)? {
                None => Ok(ExitCode::from(2)),
                Some(Acked::Confirmed | Acked::Plain) => Ok(ExitCode::SUCCESS),
                Some(Acked::Unconfirmed(why)) => {
                    // The envelope is on stdout, so this is a success; the warning says a
                    // duplicate with the same id may follow.
                    warn_unconfirmed(&why);
                    Ok(ExitCode::SUCCESS)
                }
            }
        }
        Command::Who { id, json } => {
            let ep = endpoint(id)?;
            let answer = client::who(&ep)?;
            // Names and filters are other parties' text: escaped for the terminal (`text`).
            // `--json` prints the hub's own payload, so a key this client does not know is
            // shown too.
            let text = if json {
                agent_hub_proto::kernel::text::json_for_terminal(&answer.text).into_owned()
            } else {
                crate::client::who_view::render(&answer.value)
            };
            print_line(text.trim_end()).map_err(AppError::Stdout)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Hook { hook } => Ok(run_hook(hook)),
        Command::Drain {
            id,
            format,
            confirm,
            limits,
        } => run_drain(id, format, confirm, limits),
        Command::Nudge {
            pane,
            name,
            token_file,
            port,
            text,
            submit,
        } => {
            let opts = deliver::run::NudgeOptions {
                pane,
                name,
                token_file,
                port,
                text,
                submit,
                tmux: "tmux".into(),
            };
            deliver::run::nudge(&opts)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Delegate(a) => run_delegate(a),
        Command::Task { task } => run_task(task),
        Command::Agents(a) => run_agents(a),
        Command::Install(a) => run_install(a),
        Command::Uninstall(a) => run_uninstall(a),
        Command::Mcp { id } => {
            // The token is read once, before serving: a bad file exits 1 here.
            let ep = endpoint(id)?;
            crate::mcp::serve_stdio(&ep)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Top(a) => run_top(a),
        Command::Status {
            id,
            envelope_id,
            wait_for,
            timeout,
        } => {
            let ep = endpoint(id)?;
            // clap checked the word against the list.
            let stage = wait_for.as_deref().and_then(WaitFor::parse);
            let st = match stage {
                None => client::status(&ep, &envelope_id),
                Some(w) => client::status_wait(
                    &ep,
                    &envelope_id,
                    w,
                    timeout.map(std::time::Duration::from_secs),
                    client::AWAIT_MARGIN,
                ),
            }?;
            let text = serde_json::to_string(&st).map_err(AppError::Encode)?;
            let text = agent_hub_proto::kernel::text::json_for_terminal(&text);
            print_line(&text).map_err(AppError::Stdout)?;
            Ok(ExitCode::from(status_exit_code(stage, &st)))
        }
    }
}

/// The exit code of `status` (module doc): 0 without a wait or when the stage was reached;
/// 2 a timeout; 3 the envelope settled elsewhere. The hub's `wait` key decides; a reply
/// without one (a hub that ignored the wait cannot exist: it refuses the key) is judged by
/// its state.
fn status_exit_code(stage: Option<WaitFor>, st: &agent_hub_proto::wire::EnvelopeStatus) -> u8 {
    let Some(stage) = stage else { return 0 };
    match st.wait.as_deref().and_then(WaitEnd::parse) {
        Some(WaitEnd::Reached) => 0,
        Some(WaitEnd::Timeout) => 2,
        Some(WaitEnd::Ended) => 3,
        None if stage.reached_by(&st.state) => 0,
        None => 3,
    }
}

/// Says on stderr that an envelope claiming to be the hub's was passed over
/// (`client::forged_hub_kind`; the text is already safe for a terminal).
fn warn_forged(why: &str) {
    eprintln!("agent-hub: warning: {why}");
}

/// Says on stderr that an ack went unconfirmed: the envelope is out (so the verb succeeded),
/// but a duplicate with the same id may follow (SPEC §12.2).
fn warn_unconfirmed(why: &str) {
    eprintln!("agent-hub: warning: ack not confirmed ({why}); the envelope may be delivered again with the same id");
}

/// Writes one line to stdout and flushes it, so it is out before any ack is sent.
fn print_line(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    out.flush()
}

// ----- the live view: top (crates/cli/src/client/top/, docs/operations.md "Watching a hub") -----

#[derive(Args)]
struct TopArgs {
    #[command(flatten)]
    id: Identity,
    /// Seconds between refreshes (0.2 to 3600).
    #[arg(long, value_name = "SECS", default_value = "1")]
    interval: f64,
    /// Print one snapshot as plain lines and exit (1 if the hub could not be reached).
    #[arg(long)]
    once: bool,
    /// The hub's config file: its [relay] status file gives the relay links.
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
}

fn run_top(a: TopArgs) -> Result<ExitCode, AppError> {
    if !(0.2..=3600.0).contains(&a.interval) {
        return Err(AppError::Interval(a.interval));
    }
    let options = client::top::Options {
        endpoint: endpoint(a.id)?,
        interval: std::time::Duration::from_secs_f64(a.interval),
        once: a.once,
        config: a.config,
    };
    match client::top::run(options)? {
        true => Ok(ExitCode::SUCCESS),
        false => Ok(ExitCode::from(1)),
    }
}

// ----- delegation: delegate, task status|list|cancel (crates/cli/src/client/task*.rs, docs/delegation.md) -----

#[derive(Args)]
struct DelegateArgs {
    #[command(flatten)]
    id: Identity,
    /// The agent to run the task on, by manifest name (see `agent-hub agents`).
    #[arg(long, value_name = "AGENT")]
    agent: String,
    /// The task's working directory; a relative one is taken from here. It must lie under one
    /// of the hub's `tasks.cwd_roots`.
    #[arg(long, value_name = "DIR")]
    cwd: PathBuf,
    /// The prompt, or - to read it from stdin (at most 16 MiB, surrounding whitespace trimmed).
    #[arg(long, value_name = "TEXT")]
    prompt: String,
    /// Run the task on this relay peer's hub instead of this one; `auto` lets the hub pick
    /// this hub or a linked peer that has the agent and the most room (the choice and its
    /// reason are printed on stderr, and in --json's `placement`).
    #[arg(long, value_name = "PEER")]
    peer: Option<String>,
    /// With --peer auto: only a place whose tags (relay.tags, claudectl's tags) include TAG.
    /// Repeatable, at most 8.
    #[arg(long = "requires", value_name = "TAG")]
    requires: Vec<String>,
    /// The task's wall-clock budget in seconds (default: the hub's tasks.timeout_secs).
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    timeout: Option<u64>,
    /// Send a task_progress envelope at most every SECS seconds while it runs (0: none, the
    /// default; the hub's minimum is tasks.min_progress_secs).
    #[arg(long, value_name = "SECS")]
    progress: Option<u64>,
    /// Print the hub's whole answer ({"task","state"}) as JSON instead of the task id.
    #[arg(long)]
    json: bool,
    /// After printing the id, wait for the task's outcome envelope and print it; exit 0 if the
    /// task completed, 3 if it ended in any other state.
    #[arg(long)]
    wait: bool,
    /// How the agent's requests for permission are answered: ask (each comes to you as a
    /// task_request envelope, to answer with `agent-hub task answer`), reject, or allow. The
    /// hub runs the task under the narrower of this and its own policy for the agent, and
    /// refuses one wider than it (default: the hub's policy).
    #[arg(long, value_name = "POLICY", value_parser = ["ask", "reject", "allow"])]
    permission: Option<String>,
    /// Pre-approve requests of these tool kinds (read, edit, delete, move, search, execute,
    /// think, fetch, switch_mode, other), only for paths under PATH (relative to --cwd) when
    /// given: they are allowed at once, never sent to you. Repeatable, at most 8.
    #[arg(long = "allow", value_name = "KIND[,KIND][:PATH]")]
    allow: Vec<String>,
    /// Cancel the task once its cost passes AMOUNT US dollars (over 0, at most 1000000). The
    /// hub refuses it for an agent that does not report its cost, unless --allow-unmetered.
    #[arg(long = "max-cost", value_name = "AMOUNT")]
    max_cost: Option<f64>,
    /// Cancel the task once its total tokens pass N (1 to 10^12). Refused for an agent that
    /// does not report tokens, unless --allow-unmetered.
    #[arg(long = "max-tokens", value_name = "N")]
    max_tokens: Option<u64>,
    /// Run the task even if its agent does not report what --max-cost or --max-tokens needs
    /// (that limit is then not kept, and the outcome says so).
    #[arg(long = "allow-unmetered")]
    allow_unmetered: bool,
    /// Keep the task's session SECS seconds after each completed turn, for a follow-up with
    /// `agent-hub task prompt` (at most the hub's tasks.session_keep_secs, the default).
    #[arg(long = "keep", value_name = "SECS")]
    keep: Option<u64>,
}

#[derive(Subcommand)]
enum TaskCommand {
    /// One task's record as one JSON line (state `unknown` for a task that is not yours).
    Status {
        #[command(flatten)]
        id: Identity,
        /// The task id (task-…).
        #[arg(long = "id", value_name = "TASK")]
        task: String,
        /// The same JSON line (accepted for symmetry with the other verbs).
        #[arg(long)]
        json: bool,
    },
    /// Your tasks, oldest first: task, agent, peer, state, age.
    List {
        #[command(flatten)]
        id: Identity,
        /// Print the hub's answer as one JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Answer a request a task waits on (a task_request envelope, or `task status`): pick one
    /// of the options it offered. Prints the request answered and the option; exit 1 with the
    /// hub's reason when it refuses (not open any more, an option not offered, not yours).
    Answer {
        #[command(flatten)]
        id: Identity,
        /// The task id (task-…).
        #[arg(long = "id", value_name = "TASK")]
        task: String,
        /// The request id (req-…); may be left out when the task has exactly one open.
        #[arg(long, value_name = "REQ")]
        request: Option<String>,
        /// The option id to answer with, as the request lists it (e.g. allow, reject).
        #[arg(long, value_name = "OPTION")]
        option: String,
        /// Words for the agent with the answer, where its protocol carries them (at most 4096
        /// bytes).
        #[arg(long, value_name = "TEXT")]
        message: Option<String>,
        /// Print the hub's answer ({"task","request","option","state"}) as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Send a follow-up turn to a task whose session is kept (state idle), or with --interrupt
    /// to its open turn, which is cancelled first; prints the turn's number. Its outcome comes
    /// as another task_outcome envelope (correlationId the task id, "turn" N).
    Prompt {
        #[command(flatten)]
        id: Identity,
        /// The task id (task-…).
        #[arg(long = "id", value_name = "TASK")]
        task: String,
        /// The follow-up, or - to read it from stdin (surrounding whitespace trimmed).
        #[arg(long, value_name = "TEXT")]
        prompt: String,
        /// Cancel the open turn first (session/cancel), then send this one.
        #[arg(long)]
        interrupt: bool,
        /// Print the hub's answer ({"task","turn","state"}) as JSON.
        #[arg(long)]
        json: bool,
    },
    /// End a task's kept session now; prints the task's final state (its last turn's).
    Close {
        #[command(flatten)]
        id: Identity,
        /// The task id (task-…).
        #[arg(long = "id", value_name = "TASK")]
        task: String,
        /// Print the hub's answer ({"task","state"}) as JSON instead of the state.
        #[arg(long)]
        json: bool,
    },
    /// Cancel a task you delegated; prints its state after the request (exit 1 if the hub
    /// knows no such task of yours).
    Cancel {
        #[command(flatten)]
        id: Identity,
        /// The task id (task-…).
        #[arg(long = "id", value_name = "TASK")]
        task: String,
        /// Print the hub's answer ({"task","state"}) as JSON instead of the state.
        #[arg(long)]
        json: bool,
    },
}

fn run_delegate(a: DelegateArgs) -> Result<ExitCode, AppError> {
    use crate::client::{task, task_view};
    // Everything the client can check is checked before the token file is read.
    let prompt = task_view::read_prompt(&a.prompt, std::io::stdin().lock())?;
    let cwd = task_view::absolute_cwd(&a.cwd)?;
    let allow = task_view::parse_allows(&a.allow)?;
    // clap checked the word against the list.
    let permission = a
        .permission
        .as_deref()
        .and_then(agent_hub_proto::wire::Permission::parse);
    let ep = endpoint(a.id)?;
    let req = task::DelegateRequest {
        agent: a.agent,
        cwd,
        prompt,
        timeout_secs: a.timeout,
        progress_secs: a.progress,
        peer: a.peer,
        permission,
        allow,
        keep_secs: a.keep,
        requires: (!a.requires.is_empty()).then_some(a.requires),
        max_cost_usd: a.max_cost.map(agent_hub_proto::wire::usage::Amount),
        max_tokens: a.max_tokens,
        allow_unmetered: a.allow_unmetered.then_some(true),
    };
    let answer = client::delegate(&ep, req)?;
    let text = if a.json {
        answer.text
    } else {
        answer.value.task.clone()
    };
    print_line(&text).map_err(AppError::Stdout)?;
    if let (false, Some(p)) = (a.json, &answer.value.placement) {
        // Where `auto` put it, for the person at the terminal; stdout stays the task id. The
        // reason names peers and their figures: other parties' text, escaped.
        eprintln!(
            "placement: {}",
            agent_hub_proto::kernel::text::for_terminal(&p.reason)
        );
    }
    if !a.wait {
        return Ok(ExitCode::SUCCESS);
    }
    // The same await as `agent-hub await --reply-to TASK --kind task_outcome`, on a second
    // connection: acked after it is printed, so a killed client loses nothing.
    let req = AwaitRequest {
        reply_to: Some(answer.value.task),
        kind: Some(task::TASK_OUTCOME_KIND.to_owned()),
        timeout_secs: None,
        ack: None,
        reader: Some(Reader::CliAwait.as_str().to_owned()),
    };
    // Only the hub's outcome ends the wait: another sender's `task_outcome` for this task
    // (which a current hub refuses anyway) is passed over with a warning, and the wait goes
    // on (`client::take_acked_genuine`, docs/delegation.md "`--wait`").
    let mut state = None;
    let printed = client::await_acked_reporting(
        &ep,
        req,
        |text| {
            state = task::outcome_state(text);
            print_line(text)
        },
        warn_forged,
    )?;
    match printed {
        None => Ok(ExitCode::from(2)),
        Some(acked) => {
            if let Acked::Unconfirmed(why) = acked {
                warn_unconfirmed(&why);
            }
            Ok(ExitCode::from(task::wait_exit_code(state.as_deref())))
        }
    }
}

fn run_task(t: TaskCommand) -> Result<ExitCode, AppError> {
    // A record names a peer's agent and states: other parties' text, escaped for the terminal.
    let out = |text: &str| {
        print_line(&agent_hub_proto::kernel::text::json_for_terminal(text))
            .map_err(AppError::Stdout)
    };
    match t {
        TaskCommand::Status { id, task, json: _ } => {
            let ep = endpoint(id)?;
            let answer = client::task_status(&ep, &task)?;
            out(&answer.text)?;
            // Its figures, for the person at the terminal (issue 38), on stderr as below.
            if let Some(line) = client::task_view::usage_line(&answer.value) {
                eprintln!("{line}");
            }
            // Open requests, for the person at the terminal: on stderr, so stdout stays the
            // one JSON line scripts read (which holds them too, as `requests`).
            if !answer.value.requests.is_empty() {
                eprint!(
                    "{}",
                    client::task_view::render_open_requests(
                        &answer.value.task,
                        &answer.value.requests,
                        chrono::Utc::now()
                    )
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        TaskCommand::Answer {
            id,
            task,
            request,
            option,
            message,
            json,
        } => {
            let req = client::task::TaskAnswerRequest {
                task,
                request,
                option,
                message,
            };
            // The wire's own bounds, before the token file is read.
            req.check().map_err(AppError::Answer)?;
            let ep = endpoint(id)?;
            let answer = client::task_answer(&ep, req)?;
            if json {
                out(&answer.text)?;
            } else {
                let v = &answer.value;
                out(&format!(
                    "{} {} with {}",
                    v.state.as_deref().unwrap_or("answered"),
                    v.request.as_deref().unwrap_or("-"),
                    v.option.as_deref().unwrap_or("-")
                ))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        TaskCommand::List { id, json } => {
            let ep = endpoint(id)?;
            let answer = client::tasks(&ep)?;
            if json {
                out(&answer.text)?;
            } else {
                let now = chrono::Utc::now();
                let table = client::task_view::render_tasks(&answer.value.tasks, now);
                out(table.trim_end())?;
            }
            Ok(ExitCode::SUCCESS)
        }
        TaskCommand::Prompt {
            id,
            task,
            prompt,
            interrupt,
            json,
        } => {
            let prompt = client::task_view::read_prompt(&prompt, std::io::stdin().lock())?;
            let ep = endpoint(id)?;
            let req = client::task::TaskPromptRequest {
                task,
                prompt,
                interrupt: interrupt.then_some(true),
            };
            let answer = client::task_prompt(&ep, req)?;
            if json {
                out(&answer.text)?;
            } else {
                let turn = answer.value.turn.map_or("-".to_owned(), |t| t.to_string());
                out(&format!("turn {turn}"))?;
            }
            Ok(ExitCode::SUCCESS)
        }
        TaskCommand::Close { id, task, json } => {
            let ep = endpoint(id)?;
            let answer = client::task_close(&ep, &task)?;
            let state = answer.value.state.as_deref().unwrap_or("unknown");
            out(if json { &answer.text } else { state })?;
            if state == "unknown" {
                return Err(AppError::NoSuchTask(task));
            }
            Ok(ExitCode::SUCCESS)
        }
        TaskCommand::Cancel { id, task, json } => {
            let ep = endpoint(id)?;
            let answer = client::cancel(&ep, &task)?;
            let state = answer.value.state.as_deref().unwrap_or("unknown");
            out(if json { &answer.text } else { state })?;
            if state == "unknown" {
                return Err(AppError::NoSuchTask(task));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

// ----- delivery: hook stop, drain (crates/cli/src/deliver, docs/delivery.md): in `hook.rs` -----

// ----- agents, install, uninstall (crates/host/src/agents/) -----

#[derive(Args)]
struct AgentsArgs {
    #[command(subcommand)]
    command: Option<AgentsCommand>,
    /// Folder of manifests that override or add to the built-ins (default ~/.agent-hub/agents).
    #[arg(long, value_name = "DIR", global = true)]
    agents_dir: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long, global = true)]
    json: bool,
    /// Do not run `<binary> --version`.
    #[arg(long)]
    no_version: bool,
    /// A hub config: add its `tasks.manifests_dir`, so the list is what that server finds
    /// (docs/agents.md). The config is validated as the server validates it.
    #[arg(long, value_name = "PATH", global = true)]
    config: Option<PathBuf>,
}

#[derive(Subcommand)]
enum AgentsCommand {
    /// Running agent processes: pid, agent, elapsed, CPU, status, cwd.
    Ps,
}

#[derive(Args)]
struct AgentSelection {
    /// The agent, by manifest name (repeatable).
    #[arg(
        long = "agent",
        value_name = "NAME",
        required_unless_present = "all",
        conflicts_with = "all"
    )]
    agents: Vec<String>,
    /// Every agent: for install those found on PATH, for uninstall every known one.
    #[arg(long)]
    all: bool,
    /// Write nothing: say in a line per file what would change.
    #[arg(long)]
    dry_run: bool,
    /// With --dry-run: show each file's change in full, as a unified diff.
    #[arg(long, requires = "dry_run")]
    diff: bool,
    /// Folder of manifests that override or add to the built-ins (default ~/.agent-hub/agents).
    #[arg(long, value_name = "DIR")]
    agents_dir: Option<PathBuf>,
}

#[derive(Args)]
struct InstallArgs {
    #[command(flatten)]
    select: AgentSelection,
    /// One agent: the name it authenticates as (default: the agent's name). Several agents
    /// (--all, repeated --agent): a base, each agent named BASE-<agent> (default: each agent's
    /// own name).
    #[arg(long = "as", value_name = "NAME")]
    name: Option<String>,
    /// One agent: the file holding its token (mode 600). Not with several agents: each gets
    /// its own, <name>.token in --token-dir or beside the roster of --config.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["token_dir", "config"])]
    token_file: Option<PathBuf>,
    /// Where each agent's <name>.token is (default ~/.agent-hub/tokens); a missing one is
    /// reported with the steps for the hub's operator.
    #[arg(long, value_name = "DIR", conflicts_with = "config")]
    token_dir: Option<PathBuf>,
    /// The config of a hub you operate: its port, and tokens/<name>.token beside its roster;
    /// a missing identity is added with `agent-hub-server roster add` (docs/agents.md).
    #[arg(long, value_name = "PATH")]
    config: Option<PathBuf>,
    /// The hub's TCP port on 127.0.0.1 (default: the port of --config).
    #[arg(long, required_unless_present = "config")]
    port: Option<u16>,
    /// The agent-hub binary the agents run (default: this binary's absolute path).
    #[arg(long, value_name = "PATH")]
    command: Option<PathBuf>,
    /// Folder holding opencode/agent-hub.js (default: share/agent-hub/integrations beside the
    /// binary, or the repository's integrations/ for a binary built in it).
    #[arg(long, value_name = "DIR")]
    integrations_dir: Option<PathBuf>,
    /// Do not place the agent-hub skills (agent-hub-orchestrator, agent-hub-resident) into the
    /// agent's skills folder (Claude Code: ~/.claude/skills); they are placed by default.
    #[arg(long)]
    no_skills: bool,
}

fn print_report(r: agents::Report) -> Result<ExitCode, AppError> {
    eprint!("{}", r.stderr);
    let mut out = std::io::stdout().lock();
    out.write_all(r.stdout.as_bytes())
        .and_then(|()| out.flush())
        .map_err(AppError::Stdout)?;
    Ok(if r.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn run_agents(a: AgentsArgs) -> Result<ExitCode, AppError> {
    let mut env = agents::Env::from_process(a.agents_dir)?;
    if let Some(config) = &a.config {
        env = env.with_hub_config(config)?;
    }
    print_report(match a.command {
        None => agents::agents(&env, a.json, !a.no_version),
        Some(AgentsCommand::Ps) => agents::ps(&env, a.json),
    })
}

fn selection(s: &AgentSelection) -> agents::Selection {
    use agents::Selection;
    if s.all {
        Selection::All
    } else {
        Selection::Named(s.agents.clone())
    }
}

fn writes(s: &AgentSelection) -> agents::Writes {
    match (s.dry_run, s.diff) {
        (false, _) => agents::Writes::Apply,
        (true, false) => agents::Writes::Summary,
        (true, true) => agents::Writes::Diff,
    }
}

fn run_install(a: InstallArgs) -> Result<ExitCode, AppError> {
    use agent_hub_host::agents::identity::{resolve_identities, IdentityArgs};
    let env = agents::Env::from_process(a.select.agents_dir.clone())?;
    let who = resolve_identities(
        IdentityArgs {
            command: a.command,
            several: a.select.all || a.select.agents.len() > 1,
            name: a.name,
            port: a.port,
            token_file: a.token_file,
            token_dir: a.token_dir,
            config: a.config,
        },
        &env.home,
    )?;
    let dirs = match a.integrations_dir {
        Some(d) => vec![d],
        None => agents::default_integrations_dirs(),
    };
    print_report(agents::install(
        &env,
        &selection(&a.select),
        Some(&who),
        writes(&a.select),
        &dirs,
        !a.no_skills,
    ))
}

fn run_uninstall(a: AgentSelection) -> Result<ExitCode, AppError> {
    let env = agents::Env::from_process(a.agents_dir.clone())?;
    print_report(agents::install(
        &env,
        &selection(&a),
        None,
        writes(&a),
        &[],
        true,
    ))
}
