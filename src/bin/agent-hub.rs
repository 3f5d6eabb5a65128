//! `agent-hub`: the client CLI (SPEC §9). `send` and `await`, one connection per verb.
//!
//! Exit codes: 0 success; 1 any failure with nothing queued or consumed (usage errors
//! included); 2 an await timed out hub-side (stderr silent).

use agent_hub::client::{self, Acked, AwaitOutcome, ClientError, Endpoint};
use agent_hub::wire::{AwaitRequest, Envelope};
use clap::{Args, Parser, Subcommand};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

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
    /// List every roster agent: parked awaits and their filters, queued count, last seen, last
    /// delivery. Tokens never appear.
    Who {
        #[command(flatten)]
        id: Identity,
        /// Print the hub's answer as one JSON object instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Tell where an envelope you sent or received is; prints one JSON object.
    Status {
        #[command(flatten)]
        id: Identity,
        /// The envelope id.
        #[arg(long = "id", value_name = "ID")]
        envelope_id: String,
    },
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            let text = e.render().to_string();
            let text = text.strip_prefix("error: ").unwrap_or(&text);
            eprint!("agent-hub: {text}");
            return ExitCode::from(1);
        }
    };
    match run(cli) {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("agent-hub: {msg}");
            ExitCode::from(1)
        }
    }
}

fn endpoint(id: Identity) -> Result<Endpoint, ClientError> {
    let token = client::read_token_file(&id.token_file)?;
    Ok(Endpoint {
        name: id.name,
        token,
        port: id.port,
    })
}

fn run(cli: Cli) -> Result<ExitCode, String> {
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
                    .map_err(|e| format!("cannot read the body from stdin: {e}"))?;
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
            .map_err(|e| format!("--body is not JSON: {e}"))?;
            let ep = endpoint(id).map_err(|e| e.to_string())?;
            let accepted = client::send_with_retry(&ep, env).map_err(|e| e.to_string())?;
            println!("{accepted}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Await {
            id,
            reply_to,
            kind,
            timeout,
            no_ack,
        } => {
            let ep = endpoint(id).map_err(|e| e.to_string())?;
            let req = AwaitRequest {
                reply_to,
                kind,
                timeout_secs: timeout,
                ack: None,
            };
            if no_ack {
                return match client::await_envelope(&ep, req).map_err(|e| e.to_string())? {
                    AwaitOutcome::Envelope(text) => {
                        print_line(&text).map_err(|e| {
                            format!(
                                "the envelope was received but could not be written to stdout: {e}"
                            )
                        })?;
                        Ok(ExitCode::SUCCESS)
                    }
                    AwaitOutcome::Timeout => Ok(ExitCode::from(2)),
                };
            }
            match client::await_acked(&ep, req, print_line).map_err(|e| e.to_string())? {
                None => Ok(ExitCode::from(2)),
                Some(Acked::Confirmed | Acked::Plain) => Ok(ExitCode::SUCCESS),
                Some(Acked::Unconfirmed(why)) => {
                    // The envelope is on stdout, so this is a success; the warning says a
                    // duplicate with the same id may follow.
                    eprintln!("agent-hub: warning: ack not confirmed ({why}); the envelope may be delivered again with the same id");
                    Ok(ExitCode::SUCCESS)
                }
            }
        }
        Command::Who { id, json } => {
            let ep = endpoint(id).map_err(|e| e.to_string())?;
            let presence = client::who(&ep).map_err(|e| e.to_string())?;
            let text = if json {
                serde_json::to_string(&presence).map_err(|e| e.to_string())?
            } else {
                render_presence(&presence)
            };
            print_line(text.trim_end()).map_err(|e| format!("cannot write to stdout: {e}"))?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Status { id, envelope_id } => {
            let ep = endpoint(id).map_err(|e| e.to_string())?;
            let st = client::status(&ep, &envelope_id).map_err(|e| e.to_string())?;
            let text = serde_json::to_string(&st).map_err(|e| e.to_string())?;
            print_line(&text).map_err(|e| format!("cannot write to stdout: {e}"))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Writes one line to stdout and flushes it, so it is out before any ack is sent.
fn print_line(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    out.flush()
}

/// The `who` table: one row per agent, parked filters spelled out.
fn render_presence(p: &agent_hub::wire::Presence) -> String {
    let mut out = format!("{:<24} {:>6} {:>6}  {:<24} {:<24} {}\n", "AGENT", "PARKED", "QUEUED", "LAST SEEN", "LAST DELIVERY", "FILTERS");
    for a in &p.agents {
        let filters: Vec<String> = a
            .parked
            .iter()
            .map(|f| match (&f.reply_to, &f.kind) {
                (None, None) => "any".to_owned(),
                (Some(r), None) => format!("reply-to={r}"),
                (None, Some(k)) => format!("kind={k}"),
                (Some(r), Some(k)) => format!("reply-to={r}+kind={k}"),
            })
            .collect();
        out.push_str(&format!(
            "{:<24} {:>6} {:>6}  {:<24} {:<24} {}\n",
            a.name,
            a.parked.len(),
            a.queued,
            a.last_seen.as_deref().unwrap_or("-"),
            a.last_delivery.as_deref().unwrap_or("-"),
            filters.join(", ")
        ));
    }
    out
}
