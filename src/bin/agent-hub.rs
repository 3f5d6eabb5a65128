//! `agent-hub`, the client: argv → run → exit code. The program, its verbs and its exit codes
//! are `agent_hub_cli::app` (SPEC §9, docs/delegation.md "Exit codes").

fn main() -> std::process::ExitCode {
    agent_hub_cli::app::main()
}
